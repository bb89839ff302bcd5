"""Lab (issue 27): a process for ncu: our general kernel and DeepGEMM's fp8_gemm_nt on one shape,
each called CALLS times, for profiling the TMA feed (run it with PATCH=feed and a patched
DeepGEMM build as lab/device_feed.sh does, or as committed). Usage:
PATCH=feed python lab/feed_ncu.py M N K block_m block_n stages"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import simple_loop  # noqa: E402,F401  (patches the general kernel's source per PATCH)
import torch  # noqa: E402

import fp8gemm  # noqa: E402
from fp8gemm.dispatch import General  # noqa: E402
from fp8gemm.testing import random_case  # noqa: E402


def main(m, n, k, block_m, block_n, stages):
    case = random_case(m, n, k, seed=1)
    a, b, sa, sb = case.as_torch()
    cfg = General(block_n, stages, 8, 1, block_m)
    from fp8gemm.bench.peers import Inputs, prepare_deepgemm
    dg = prepare_deepgemm(Inputs(case, "bfloat16"))["fp8_gemm_nt"]
    for _ in range(int(os.environ.get("CALLS", "2"))):
        fp8gemm.matmul(a, b, sa, sb, config=cfg)
        dg()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(*(int(v) for v in sys.argv[1:7]))
