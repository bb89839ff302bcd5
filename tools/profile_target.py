"""A process for `ncu` to profile: fp8gemm.matmul on one shape, a few times.
Usage: ncu ... python tools/profile_target.py M N K [calls] [--exp NAME]"""
import sys

import torch

import fp8gemm
from fp8gemm.testing import random_case


def main():
    args = [x for x in sys.argv[1:] if x.isdigit()]
    m, n, k = (int(x) for x in args[:3])
    calls = int(args[3]) if len(args) > 3 else 5
    if "--exp" in sys.argv:                          # a source-edited variant of exp_general
        sys.path.insert(0, "tools")
        import exp_general
        from fp8gemm import compiler
        edits = exp_general.EXPERIMENTS[sys.argv[sys.argv.index("--exp") + 1]][0]
        compiler.flatten = exp_general.patched(edits)
    a, b, sa, sb = random_case(m, n, k, seed=1).as_torch()
    for _ in range(calls):
        fp8gemm.matmul(a, b, sa, sb)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
