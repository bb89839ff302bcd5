"""Lab (issue 27): a process for ncu: the general kernel on one shape and tile with the chunked
K loop off, then on (two instantiations), each called CALLS times.
Usage: python lab/chunk_ncu.py M N K block_m block_n stages"""
import os
import sys

import torch

import fp8gemm
from fp8gemm import plans
from fp8gemm.dispatch import General
from fp8gemm.dispatch import general as g
from fp8gemm.testing import random_case


def main(m, n, k, block_m, block_n, stages):
    a, b, sa, sb = random_case(m, n, k, seed=1).as_torch()
    cfg = General(block_n, stages, 8, 1, block_m)
    chunk = g.chunk_blocks
    for on in (False, True):
        g.chunk_blocks = chunk if on else (lambda *args: 0)
        plans.PLANS.clear()
        for _ in range(int(os.environ.get("CALLS", "2"))):
            fp8gemm.matmul(a, b, sa, sb, config=cfg)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main(*(int(v) for v in sys.argv[1:7]))
