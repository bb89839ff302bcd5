"""Host time of fp8gemm.moe in eager mode (issue 8): DeepSeek-V4-Flash experts (256 x [4096, 2048]),
FP8 input, uniform top-6 routing, CuPy and torch callers. Per call: wall clock of batches of
calls with a device sync between batches (outside the timed part), so the queue never fills;
beside it the layer's device time (CUPTI, L2 cold) and the top functions by own time (cProfile).
Run one token count per process for clean host times (CUPTI stays attached after the first).
Usage: python lab/moe_host.py [TOKENS ...]   (default 1)"""
import cProfile
import pstats
import sys

import cupy
import numpy as np

import fp8gemm
from fp8gemm.bench.cli import host_batched_us
from fp8gemm.bench.moe import MODELS, fp8_bytes, route
from fp8gemm.bench.timing import L2Flush, time_calls


def main():
    import torch

    tokens = [int(t) for t in sys.argv[1:]] or [1]
    experts, hidden, inter = MODELS["flash"]
    rng = cupy.random.RandomState(0)
    w1, w2 = fp8_bytes((experts, 2 * inter, hidden), rng), fp8_bytes((experts, hidden, inter), rng)
    s1 = cupy.full((experts, 2 * inter // 128, hidden // 128), 1e-3, dtype=cupy.float32)
    s2 = cupy.full((experts, hidden // 128, inter // 128), 1e-3, dtype=cupy.float32)
    flush = L2Flush()
    for t in tokens:
        ids = cupy.asarray(route(np.random.default_rng(t), t, experts, "uniform"))
        w = cupy.full((t, 6), 1.0 / 6, dtype=cupy.float32)
        x = fp8_bytes((t, hidden), rng)
        xs = cupy.full((t, hidden // 128), 1.0 / 64, dtype=cupy.float32)
        cp_args = (x, ids, w, w1, s1, w2, s2)
        th = [torch.as_tensor(a, device="cuda") for a in cp_args + (xs,)]

        def cupy_call():
            return fp8gemm.moe(*cp_args, x_scale=xs)

        def torch_call():
            return fp8gemm.moe(*th[:7], x_scale=th[7])

        # Host first: a finished profiler session leaves CUPTI attached and slows every later
        # launch (bench/NOTES.md, session 7); so only the first token count's host time is clean.
        host_cp = host_batched_us(cupy_call, 200, 20, cupy.cuda.Device().synchronize)
        host_th = host_batched_us(torch_call, 200, 20, torch.cuda.synchronize)
        dev = time_calls({"layer": cupy_call}, flush, 10)["layer"]
        print(f"T={t}: device {dev:.1f} us; host per eager call: CuPy {host_cp:.1f} us, torch {host_th:.1f} us",
              flush=True)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(200):
            cupy_call()
        prof.disable()
        cupy.cuda.Device().synchronize()
        pstats.Stats(prof).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
