"""Grouped GEMM at decode token counts (issue 8): each MoE GEMM (L1 [pairs, H] x [E, 2I, H] and
L2 [pairs, I] x [E, H, I], fp16 out (CuPy has no bf16; same bytes), contiguous layout, uniform routing) timed alone with the
dispatcher's choice and with the K split forced to 1..4, against its roofline (active experts'
weights + activations over the copy bandwidth measured in the same run) + 2 us.
CUPTI device time, L2 flushed before each call, median of 20.
Usage: PYTHONPATH=. python tools/exp_grouped_decode.py [--tokens 1,8,16]"""
import dataclasses
import sys

import cupy
import numpy as np

import fp8gemm
from fp8gemm import grouped
from fp8gemm.bench.cli import measure_ceilings
from fp8gemm.bench.moe import MODELS, fp8_bytes, route
from fp8gemm.bench.timing import L2Flush, time_calls

_orig = grouped.grouped_candidate


_picked = []


def forced(splits):
    def pick(*args, **kw):
        c = _orig(*args, **kw)
        c = c if splits is None else dataclasses.replace(c, splits=splits)
        _picked.append(c)
        return c
    return pick


def main():
    tokens = [1, 8, 16]
    if "--tokens" in sys.argv:
        tokens = [int(v) for v in sys.argv[sys.argv.index("--tokens") + 1].split(",")]
    flush = L2Flush()
    ceil = measure_ceilings(flush, 10)
    bw = ceil["copy_bandwidth_bytes_per_s"]
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    grng = cupy.random.RandomState(3)
    table = []
    for name, (experts, hidden, inter) in MODELS.items():
        w1 = fp8_bytes((experts, 2 * inter, hidden), grng)
        w2 = fp8_bytes((experts, hidden, inter), grng)
        s1 = cupy.full((experts, 2 * inter // 128, hidden // 128), 1.0 / (64 * hidden ** 0.5), dtype=cupy.float32)
        s2 = cupy.full((experts, hidden // 128, inter // 128), 1.0 / (64 * inter ** 0.5), dtype=cupy.float32)
        rng = np.random.default_rng(7)
        for t in tokens:
            ids = route(rng, t, experts, "uniform")
            counts = np.bincount(ids.reshape(-1), minlength=experts)
            pairs, active = int(counts.sum()), int((counts > 0).sum())
            offsets = cupy.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
            for gemm, w, s, k, n in (("L1", w1, s1, hidden, 2 * inter), ("L2", w2, s2, inter, hidden)):
                a = fp8_bytes((pairs, k), grng)
                sa = cupy.full((pairs, k // 128), 1.0 / 64, dtype=cupy.float32)
                nbytes = active * n * k + pairs * k + pairs * n * 2
                bound = nbytes / bw * 1e6
                fns, outs, why = {}, {}, {}
                for splits in (None, 1, 2, 3, 4):
                    label = "auto" if splits is None else f"k{splits}"
                    grouped.grouped_candidate = forced(splits)
                    grouped._plans.clear()
                    out = cupy.empty((pairs, n), dtype=cupy.float16)   # bf16 costs the same; CuPy has no bf16
                    fp8gemm.grouped_matmul_contiguous(a, w, sa, s, offsets, out=out)
                    _, runner, _ = next(iter(grouped._plans.values()))
                    why[label] = f"splits={_picked[-1].splits} block_n={_picked[-1].block_n} swap={_picked[-1].swap_ab}"
                    fns[label] = (lambda r=runner, o=out: r.run(o.data.ptr, cupy.cuda.get_current_stream().ptr))
                    outs[label] = out
                grouped.grouped_candidate = _orig
                grouped._plans.clear()
                cupy.cuda.Device().synchronize()
                us = time_calls(fns, flush, 20)
                ref = outs["k1"].astype(cupy.float32)
                for label in fns:
                    d = float(cupy.linalg.norm(outs[label].astype(cupy.float32) - ref) / cupy.linalg.norm(ref))
                    frac = (bound + 2.0) / us[label]
                    table.append((name, t, gemm, active, label, us[label], bound, frac, d))
                    print(f"{name:5} T={t:<4} {gemm} experts={active:3} {label:5} {us[label]:8.2f} us  bound {bound:7.2f}"
                          f"  (bound+2)/us {frac:.3f}  diff vs k1 {d:.1e}  {why[label]}", flush=True)
    print("\nmodel T gemm | " + " | ".join(["auto", "k1", "k2", "k3", "k4"]) + " | bound")
    keys = sorted({(r[0], r[1], r[2]) for r in table}, key=lambda x: (x[0], x[1], x[2]))
    for key in keys:
        vals = {r[4]: r for r in table if r[:3] == key}
        print(f"{key[0]} {key[1]} {key[2]} | " + " | ".join(f"{vals[l][5]:.1f} ({vals[l][7]:.2f})" for l in
                                                        ("auto", "k1", "k2", "k3", "k4")) + f" | {vals['k1'][6]:.1f}")


if __name__ == "__main__":
    main()
