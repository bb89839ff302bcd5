"""Lab (issue 55): the dense mainloop (config=Dense) against DeepGEMM's fp8_gemm_nt and our
dispatcher's pick, in one process, L2 cold, CUPTI (bench/timing.py: the contenders take turns).
Every contender gets the As layout it prefers: M-major (TMA-aligned) for Dense and DeepGEMM, our
quantizer's default K-major for the dispatcher's pick ("ours"), plus the dispatcher's pick on the
M-major As ("ours_mm"). Each result is checked against DeepGEMM's before it is timed (bf16 bits
may differ in the last place: relative Frobenius distance <= 1e-2 asserted).
Prints one row per (shape, config): microseconds, dense / DeepGEMM, TFLOP/s; writes JSON.
Usage: python lab/dense_ab.py OUT.json [ITERS]"""
import json
import os
import sys

import cupy
import torch

import fp8gemm
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import Dense
from fp8gemm.testing import random_case

# (M, N, K), [Dense configs (block_m, block_n, stages, cluster, multicast_a, group[, two_accum])];
# each runs on M-major As and (" km") on the K-major As our quantizer writes.
CASES = [
    ((4096, 4096, 4096), [(256, 128, 3, 2, 1, 16), (128, 128, 5, 1, 1, 8, 1)]),
    ((128, 4096, 8192), [(64, 64, 8, 1, 1, 8)]),
    ((16384, 8192, 4096), [(256, 128, 3, 2, 1, 16)]),
    ((1024, 4096, 4096), [(256, 128, 3, 2, 1, 8), (128, 128, 5, 1, 1, 8, 1)]),
    ((512, 7168, 4096), [(128, 128, 5, 1, 1, 8, 1)]),
    ((256, 1536, 4096), [(64, 64, 8, 1, 1, 8)]),
    ((2048, 2112, 7168), [(128, 144, 4, 1, 1, 8)]),
]


# DENSE_AB_CASES="0,2": only those CASES (each new configuration costs an NVRTC compile per layout)
if os.environ.get("DENSE_AB_CASES"):
    CASES = [CASES[int(i)] for i in os.environ["DENSE_AB_CASES"].split(",")]


def m_major(sa):
    m, kb = sa.shape
    mp = -(-m // 4) * 4
    buf = torch.zeros((kb, mp), dtype=torch.float32, device=sa.device)
    buf[:, :m] = sa.t()
    return buf[:, :m].t()


def contenders(deep_gemm, m, n, k):
    """(a, b, sa, sb, sa_mm, {"deepgemm": its call on its TMA-aligned M-major As, "ours": the
    dispatcher's pick on our quantizer's K-major As}) for one random case."""
    a, b, sa, sb = random_case(m, n, k, seed=1).as_torch()
    d_dg = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    align = getattr(deep_gemm, "get_mn_major_tma_aligned_tensor", None) or deep_gemm.get_col_major_tma_aligned_tensor
    sa_dg = align(sa)
    fns = {"deepgemm": lambda: deep_gemm.fp8_gemm_nt((a, sa_dg), (b, sb), d_dg, disable_ue8m0_cast=True) or d_dg,
           "ours": lambda: fp8gemm.matmul(a, b, sa, sb)}
    return a, b, sa, sb, m_major(sa), fns


def check_against_first(fns, shape, tol=1e-2):
    """Run each contender once (compiling it before it is timed) and check its result against the
    first's (DeepGEMM's in `contenders`): relative Frobenius error at most ``tol``."""
    ref = None
    for name, fn in fns.items():
        got = fn()
        torch.cuda.synchronize()
        if ref is None:
            ref = got.float().clone()
        err = float((got.float() - ref).norm() / ref.norm())
        assert err <= tol, f"{name} at {shape}: {err:.3e} from the first contender's result"


def main(out_path, iters=20):
    import deep_gemm
    flush = L2Flush()
    rows = []
    for (m, n, k), cfgs in CASES:
        a, b, sa, sb, sa_mm, fns = contenders(deep_gemm, m, n, k)
        fns["ours_mm"] = lambda: fp8gemm.matmul(a, b, sa_mm, sb)
        for cfg in cfgs:
            c = Dense(*cfg)
            fns[c.label()] = (lambda c=c: fp8gemm.matmul(a, b, sa_mm, sb, config=c))
            # the same tile on our quantizer's K-major As (the 4-block window)
            fns[c.label() + " km"] = (lambda c=c: fp8gemm.matmul(a, b, sa, sb, config=c))
        check_against_first(fns, (m, n, k))
        times = time_calls(fns, flush, iters)
        flops = 2.0 * m * n * k
        for name, us in times.items():
            rows.append({"m": m, "n": n, "k": k, "name": name, "us": us, "vs_dg": us / times["deepgemm"],
                         "tflops": flops / us / 1e6})
            print(f"{m:6d} {n:5d} {k:5d} {name:28s} {us:9.2f} us  x{us / times['deepgemm']:.3f} DG  "
                  f"{flops / us / 1e6:7.1f} TFLOP/s", flush=True)
    json.dump(rows, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20)
