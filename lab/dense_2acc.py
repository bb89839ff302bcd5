"""Lab (issue 55): the dense kernel's one-wave tiles with one accumulator against two in turn
(Dense.two_accum), and the dispatcher's pick on the same M-major As, one process, CUPTI, L2 cold,
contenders in turns (bench/timing.py). No DeepGEMM here: ratios among our own kernels only.
Usage: python lab/dense_2acc.py [ITERS]"""
import sys

import torch

import fp8gemm
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import Dense
from fp8gemm.testing import random_case

CASES = [((4096, 4096, 4096), (128, 128, 5)), ((512, 7168, 4096), (128, 128, 5)), ((1024, 4096, 4096), (128, 128, 5)),
         ((128, 4096, 8192), (64, 64, 8)), ((256, 1536, 4096), (64, 64, 8)), ((2048, 7168, 2048), (128, 128, 5))]


def main(iters=20):
    flush = L2Flush()
    for (m, n, k), cfg in CASES:
        a, b, sa, sb = random_case(m, n, k, seed=1).as_torch()
        sa_mm = torch.zeros((sa.shape[1], -(-m // 4) * 4), dtype=torch.float32, device="cuda")
        sa_mm[:, :m] = sa.t()
        sa_mm = sa_mm[:, :m].t()
        one, two = Dense(*cfg), Dense(*cfg, two_accum=1)
        fns = {"ours_mm": lambda: fp8gemm.matmul(a, b, sa_mm, sb),
               one.label(): lambda: fp8gemm.matmul(a, b, sa_mm, sb, config=one),
               two.label(): lambda: fp8gemm.matmul(a, b, sa_mm, sb, config=two)}
        ref = fns["ours_mm"]().float()
        for name, fn in fns.items():
            err = float((fn().float() - ref).norm() / ref.norm())
            assert err <= 1e-2, f"{name} {(m, n, k)}: {err:.3e}"
        t = time_calls(fns, flush, iters)
        for name, us in t.items():
            print(f"{m:6d} {n:5d} {k:5d} {name:26s} {us:9.2f} us  x{us / t[one.label()]:.3f} of one accumulator  "
                  f"{2.0 * m * n * k / us / 1e6:7.1f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
