"""Device time of the unfused MoE layer (fp8gemm.moe) on DeepSeek-V4-Flash (E 256, H 4096, I 2048,
top-6, uniform random routing), against its two grouped GEMMs alone on the same routed rows: what
the glue (route, SwiGLU + requantize, combine) and the FP32 intermediate cost, the baseline a fused
layer must beat. Method: bench/timing.time_calls (CUPTI, L2 flushed before every call, sum of every
kernel of the call, median). Usage: python lab/moe_bench.py [--tokens 1,8,...]"""
import argparse
import sys

import cupy
import numpy as np

import fp8gemm
from fp8gemm.bench.timing import L2Flush, time_calls
from grouped_bench import fp8_bytes

E, H, I, TOP_K = 256, 4096, 2048, 6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="1,8,128,1024,4096")
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    flush = L2Flush()
    w1, w2 = fp8_bytes((E, 2 * I, H)), fp8_bytes((E, H, I))
    s1 = cupy.full((E, 2 * I // 128, H // 128), 2e-3, dtype=cupy.float32)
    s2 = cupy.full((E, H // 128, I // 128), 2e-3, dtype=cupy.float32)
    rng = np.random.default_rng(0)
    print(f"{'T':>5} {'layer us':>9} {'L1+L2 us':>9} {'glue+fp32 h':>11}")
    for t in (int(v) for v in args.tokens.split(",")):
        x = cupy.asarray(rng.standard_normal((t, H)).astype(np.float32)).astype(cupy.float16)
        ids = cupy.asarray(np.stack([rng.choice(E, TOP_K, replace=False) for _ in range(t)]).astype(np.int32))
        w = cupy.full((t, TOP_K), 1.0 / TOP_K, dtype=cupy.float32)
        xq, xs = fp8gemm.quantize_per_token_group(x)
        counts = np.bincount(ids.get().reshape(-1), minlength=E)
        offsets = cupy.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
        p = t * TOP_K
        a1, sa1 = fp8_bytes((p, H)), cupy.ones((p, H // 128), dtype=cupy.float32)
        a2, sa2 = fp8_bytes((p, I)), cupy.ones((p, I // 128), dtype=cupy.float32)
        h = cupy.empty((p, 2 * I), dtype=cupy.float32)
        fns = {"layer": lambda: fp8gemm.moe(xq, ids, w, w1, s1, w2, s2, x_scale=xs),
               "gemms": lambda: (fp8gemm.grouped_matmul_contiguous(a1, w1, sa1, s1, offsets, out=h),
                                 fp8gemm.grouped_matmul_contiguous(a2, w2, sa2, s2, offsets, out_dtype="bfloat16"))}
        for fn in fns.values():
            fn()
        cupy.cuda.Device().synchronize()
        us = time_calls(fns, flush, args.iters)
        print(f"{t:>5} {us['layer']:9.1f} {us['gemms']:9.1f} {us['layer'] - us['gemms']:11.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
