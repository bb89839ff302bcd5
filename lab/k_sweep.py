"""Lab (issue 27): where the mid-M gap to DeepGEMM lies, fixed cost or per K block. For a few
(M, N) of the trace, K from 128 to 8192: our dispatcher's pick, one fixed 64 x 64 tile (General
64 x 64 s6, the same machine code at every K) and DeepGEMM's fp8_gemm_nt, bf16 out; then a least
squares line t = a + b * ceil(K / 128) per contender and (M, N): a is the fixed cost (launch to
first block, epilogue, exit), b the cost per K block. DeepGEMM's kernels are compiled first in
worker processes (bench/warm.py). CUPTI, L2 flushed, median of ITERS rounds in turns, one process.
Usage: python lab/k_sweep.py OUT.json"""
import json
import os
import sys

import numpy as np
import torch

import fp8gemm
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import General
from fp8gemm.testing import random_case

MN = [(64, 8192), (128, 4096), (256, 4096), (512, 4096)]
KS = [128, 512, 1024, 2048, 4096, 8192]
FIXED = General(64, 6, 8, 1, 64)


def main(out):
    try:
        import deep_gemm  # noqa: F401

        from fp8gemm.bench.peers import Inputs, prepare_deepgemm
        from fp8gemm.bench.warm import warm
        warm([{"kind": "deepgemm_gemm", "m": m, "n": n, "k": k} for m, n in MN for k in KS])
    except ImportError:
        prepare_deepgemm = None
    fns, keep = {}, []
    for m, n in MN:
        for k in KS:
            case = random_case(m, n, k, seed=1)
            keep.append(case)
            a, b, sa, sb = case.as_torch()
            fns[(m, n, k, "chosen")] = lambda a=a, b=b, sa=sa, sb=sb: fp8gemm.matmul(a, b, sa, sb)
            fns[(m, n, k, "64x64s6")] = lambda a=a, b=b, sa=sa, sb=sb: fp8gemm.matmul(a, b, sa, sb, config=FIXED)
            if prepare_deepgemm is not None:
                fns[(m, n, k, "deepgemm")] = prepare_deepgemm(Inputs(case, "bfloat16"))["fp8_gemm_nt"]
    for f in fns.values():
        f()
    torch.cuda.synchronize()
    us = time_calls(fns, L2Flush(), int(os.environ.get("ITERS", "15")))
    rows = [{"m": m, "n": n, "k": k, "who": who, "us": v,
             "chosen": fp8gemm.explain(m, n, k).splitlines()[0] if who == "chosen" else ""}
            for (m, n, k, who), v in us.items()]
    print(f"{'M':>5} {'N':>5} {'who':>9} " + " ".join(f"K={k:<6}" for k in KS) + "   fixed   /block")
    fits = []
    for m, n in MN:
        for who in ("chosen", "64x64s6", "deepgemm"):
            t = [us.get((m, n, k, who)) for k in KS]
            if None in t:
                continue
            kb = np.array([-(-k // 128) for k in KS[1:]], float)   # K = 128 takes another path when chosen
            b_, a_ = np.polyfit(kb, np.array(t[1:]), 1)
            fits.append({"m": m, "n": n, "who": who, "fixed_us": a_, "per_block_us": b_})
            print(f"{m:5} {n:5} {who:>9} " + " ".join(f"{v:8.2f}" for v in t) + f" {a_:7.2f} {b_:8.4f}")
    with open(out, "w") as fh:
        json.dump({"rows": rows, "fits": fits}, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
