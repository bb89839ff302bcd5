"""Which grouped tile is fastest for the MoE layer's two GEMMs at 64-4096 tokens (issue 29): the
chain's L1 (fp32 h, promoted per 128-K block) and L2 (bf16), contiguous layout, on the bench's
routings (bench/moe.py: both models, uniform and skewed), each with the dispatcher's tile and with
every grouped tile forced (grouped_matmul_contiguous(config=)): 128-row General tiles, swap-AB with
8 / 16 / 32-token tiles, and Wg3's 192-row tiles. The question it answers: the fused L1 (128-row
tiles) beat the chain at 8-32 estimated rows per expert, where the chain's L1 runs swap-AB; is
that the tile (then SWAP_MAX_ROWS is too high) or the fusion? CUPTI, L2 flushed, turns
(bench/timing.py). Usage: python lab/grouped_tiles.py [tokens ...]"""
import sys

import cupy
import numpy as np

import fp8gemm
from fp8gemm.bench.moe import MODELS, cases, fp8_bytes
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import General, SwapAB, Wg3
from fp8gemm.dispatch import grouped as tiles
from fp8gemm.dispatch.general import MAX_STAGES
from fp8gemm.grouped import rows_estimate


def forced_tiles(out_dtype: str, groups: int, precise: bool):
    """{label: config} of every grouped tile that fits beside a ``groups``-group prefix."""
    out = {}
    for c in [General(128, s) for s in range(MAX_STAGES, 1, -1)]:
        if c.grouped_smem_bytes(out_dtype, groups) <= 232448:
            out["general128"] = c
            break
    for bn in (8, 16, 32):
        out[f"swap{bn}"] = SwapAB(bn, MAX_STAGES, 1, 1)
    if out_dtype != "float32" or not precise:
        for s in range(MAX_STAGES, 1, -1):
            if Wg3(128, s, 8).grouped_smem_bytes(out_dtype, groups) <= 232448:
                out["wg3"] = Wg3(128, s, 8)
                break
    return out


def main(tokens=(64, 128, 256, 512, 1024, 2048, 4096)):
    flush = L2Flush()
    grng = cupy.random.RandomState(3)
    print(f"{'model':5} {'routing':7} {'T':>5} {'gemm':4} {'est':>5} {'default':26} times us (best marked *)")
    for name, (experts, hidden, inter) in MODELS.items():
        w1 = fp8_bytes((experts, 2 * inter, hidden), grng)
        w2 = fp8_bytes((experts, hidden, inter), grng)
        s1 = cupy.full((experts, 2 * inter // 128, hidden // 128), 1.0 / (32 * hidden ** 0.5), dtype=cupy.float32)
        s2 = cupy.full((experts, hidden // 128, inter // 128), 1.0 / (32 * inter ** 0.5), dtype=cupy.float32)
        for routing, t, ids, _ in cases(tokens, experts, ["uniform", "skewed"], seed=7):
            counts = np.bincount(ids.reshape(-1), minlength=experts)
            pairs = int(counts.sum())
            offsets = cupy.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
            est, active = rows_estimate(pairs, experts)
            for gname, (w, s, k, n, out_dtype, precise) in {
                    "L1": (w1, s1, hidden, 2 * inter, "float32", False),
                    "L2": (w2, s2, inter, hidden, "bfloat16", True)}.items():
                a = fp8_bytes((pairs, k), grng)
                sa = cupy.full((pairs, k // 128), 1.0 / 64, dtype=cupy.float32)
                out = cupy.empty((pairs, n), dtype=cupy.float32 if out_dtype == "float32" else cupy.float16)
                if out_dtype == "bfloat16":
                    out = None
                default = tiles.candidate(n, k, out_dtype, experts, est, active, precise_fp32=precise)
                fns = {"default": (lambda a=a, w=w, sa=sa, s=s, out=out, od=out_dtype, p=precise:
                                   fp8gemm.grouped_matmul_contiguous(a, w, sa, s, offsets, out=out,
                                                                     out_dtype=None if out is not None else od,
                                                                     precise_fp32=p))}
                for label, c in forced_tiles(out_dtype, experts, precise).items():
                    fns[label] = (lambda a=a, w=w, sa=sa, s=s, out=out, od=out_dtype, p=precise, c=c:
                                  fp8gemm.grouped_matmul_contiguous(a, w, sa, s, offsets, out=out,
                                                                    out_dtype=None if out is not None else od,
                                                                    precise_fp32=p, config=c))
                for f in fns.values():
                    f()
                cupy.cuda.Device().synchronize()
                us = time_calls(fns, flush, 10)
                best = min(us, key=us.get)
                cells = " ".join(f"{lb}={v:.1f}{'*' if lb == best else ''}" for lb, v in us.items())
                print(f"{name:5} {routing:7} {t:5d} {gname:4} {est:5.1f} {default.label():26} {cells}", flush=True)


if __name__ == "__main__":
    main(tuple(int(v) for v in sys.argv[1:]) or (64, 128, 256, 512, 1024, 2048, 4096))
