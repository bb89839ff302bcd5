"""Device time of the grouped GEMM (issue 8) on DeepSeek-V4 expert shapes, against one plain
fp8gemm.matmul per active expert (the unfused baseline) and against roofline + 2 us.

Method: bench/timing.time_calls (CUPTI through torch.profiler, L2 flushed by a 256 MiB read before
every call, median of --iters; a call's time is the sum of all its kernels). Router ids drawn
uniformly at random, top-6; the contiguous layout sorts the (token, slot) rows by expert, the
masked one pads every expert to the largest count. Roofline: bytes of the active experts' weights,
A and C once; ceilings measured in the same run (bench/cli.measure_ceilings).
Usage: python lab/grouped_bench.py [--tokens 1,8,...] [--iters 10] [--csv PATH]
"""
import argparse
import csv
import sys

import cupy
import numpy as np

import fp8gemm
from fp8gemm.bench.cli import measure_ceilings
from fp8gemm.bench.timing import L2Flush, time_calls

# (name, N, K, experts): the two GEMMs of an expert, V4-Flash and V4-Pro.
LAYERS = [("flash_L1", 4096, 4096, 256), ("flash_L2", 4096, 2048, 256), ("pro_L1", 6144, 7168, 384)]
TOP_K = 6


def fp8_bytes(shape):
    """Random finite positive FP8 E4M3 bytes (0x00..0x6F: no NaN), one leading slice at a time
    (CuPy draws through int64: V4-Pro's 17 GB L1 at once would need 8x that)."""
    out = cupy.empty(shape, dtype=cupy.uint8)
    for i in range(shape[0]):
        out[i] = cupy.random.randint(0, 0x70, size=shape[1:], dtype=cupy.uint8)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="1,8,64,256,1024,4096")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--baseline-max-tokens", type=int, default=256)
    ap.add_argument("--csv", default=None)
    args = ap.parse_args()
    flush = L2Flush()
    ceil = measure_ceilings(flush, args.iters)
    bw, peak = ceil["copy_bandwidth_bytes_per_s"], ceil["fp8_dense_peak_flops"]
    print(f"ceilings: copy {bw / 1e12:.2f} TB/s, FP8 {peak / 1e12:.0f} TFLOP/s", flush=True)
    rng = cupy.random.default_rng(0)
    host_rng = np.random.default_rng(0)
    rows = []
    for name, n, k, experts in LAYERS:
        kb, nb = -(-k // 128), -(-n // 128)
        b = fp8_bytes((experts, n, k))
        sb = (rng.random((experts, nb, kb), dtype=cupy.float32) + 0.5) * 1e-3
        for t in (int(x) for x in args.tokens.split(",")):
            ids = np.stack([host_rng.choice(experts, TOP_K, replace=False) for _ in range(t)])
            counts = np.bincount(ids.reshape(-1), minlength=experts)
            p = int(counts.sum())
            offsets = cupy.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
            a_pad = fp8_bytes((p + 128, k))        # 128 spare rows: TMA boxes never leave the map
            sa_pad = rng.random((p + 128, kb), dtype=cupy.float32) + 0.5
            a, sa = a_pad[:p], sa_pad[:p]
            max_rows = int(counts.max())
            am = cupy.zeros((experts, max_rows, k), dtype=cupy.uint8)
            sam = cupy.ones((experts, max_rows, kb), dtype=cupy.float32)
            dev_counts = cupy.asarray(counts.astype(np.int32))
            fns = {"contiguous": lambda: fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets),
                   # Same rows, but the map spans 128 more: is a box past the map's end (zero fill) slow?
                   "contiguous_padded": lambda: fp8gemm.grouped_matmul_contiguous(a_pad, b, sa_pad, sb, offsets),
                   "masked": lambda: fp8gemm.grouped_matmul_masked(am, b, sam, sb, dev_counts, expected_rows=p)}
            if t <= args.baseline_max_tokens:
                off = np.concatenate([[0], np.cumsum(counts)])
                active = [e for e in range(experts) if counts[e]]

                def per_expert():
                    for e in active:
                        fp8gemm.matmul(a[off[e]:off[e + 1]], b[e], sa[off[e]:off[e + 1]], sb[e])
                fns["per_expert_matmul"] = per_expert
            for fn in fns.values():
                fn()
            cupy.cuda.Device().synchronize()
            us = time_calls(fns, flush, args.iters)
            active_n = int((counts > 0).sum())
            nbytes = active_n * (n * k + 4 * nb * kb) + p * (k + 4 * kb) + 2 * p * n
            roof = max(nbytes / bw, 2.0 * p * n * k / peak) * 1e6
            row = dict(layer=name, tokens=t, rows=p, active_experts=active_n, N=n, K=k,
                       contiguous_us=us["contiguous"], padded_us=us["contiguous_padded"], masked_us=us["masked"],
                       per_expert_us=us.get("per_expert_matmul"), roofline_us=roof,
                       frac_contiguous=(roof + 2) / us["contiguous"], frac_masked=(roof + 2) / us["masked"],
                       tflops_contiguous=2.0 * p * n * k / us["contiguous"] / 1e6)
            rows.append(row)
            print(" ".join(f"{kk}={v:.4g}" if isinstance(v, float) else f"{kk}={v}" for kk, v in row.items()),
                  flush=True)
        cupy.get_default_memory_pool().free_all_blocks()
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    print(f"\n{'layer':>9} {'T':>5} {'rows':>6} {'exp':>4} {'contig':>8} {'padded':>8} {'masked':>8} {'per-exp':>8} "
          f"{'roof':>7} {'fr_c':>5} {'fr_m':>5} {'TF/s':>5}")
    for r in rows:
        pe = f"{r['per_expert_us']:8.1f}" if r["per_expert_us"] else f"{'-':>8}"
        print(f"{r['layer']:>9} {r['tokens']:>5} {r['rows']:>6} {r['active_experts']:>4} {r['contiguous_us']:8.1f} "
              f"{r['padded_us']:8.1f} {r['masked_us']:8.1f} {pe} {r['roofline_us']:7.1f} {r['frac_contiguous']:5.2f} "
              f"{r['frac_masked']:5.2f} {r['tflops_contiguous']:5.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
