"""The three-consumer-warpgroup kernel (sm90_fp8_gemm_wg3, v16) against the
dispatcher's pick at large M: CUPTI device time, L2 flushed before each call, median of 10, and
each output's relative difference from the dispatcher's.
Usage: python lab/exp_wg3.py [--shapes MxNxK,...]"""
import sys

import torch

import fp8gemm
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import Wg3, select
from fp8gemm.testing import random_case

SHAPES = [(4096, 4096, 4096), (8192, 8192, 4096), (16384, 8192, 4096), (2048, 7168, 2048), (4096, 8192, 1024),
          (1024, 8192, 4096), (8192, 1536, 4096)]
CONFIGS = {"wg3 128 s4 g8": (128, 4, 8), "wg3 128 s4 g1": (128, 4, 1), "wg3 128 s3 g8": (128, 3, 8),
           "wg3 64 s6 g8": (64, 6, 8)}


def main():
    shapes = SHAPES
    if "--shapes" in sys.argv:
        shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[sys.argv.index("--shapes") + 1].split(",")]
    flush = L2Flush()
    for m, n, k in shapes:
        case = random_case(m, n, k, seed=1)
        a, b, sa, sb = case.as_torch()
        cands = {"dispatch": select(m, n, k)}
        for name, (block_n, stages, group_m) in CONFIGS.items():
            cands[name] = Wg3(block_n, stages, group_m)
        outs = {nm: torch.empty(m, n, dtype=torch.bfloat16, device="cuda") for nm in cands}
        fns = {nm: (lambda c=c, o=outs[nm]: fp8gemm.matmul(a, b, sa, sb, out=o, config=c)) for nm, c in cands.items()}
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        us = time_calls(fns, flush, 10)
        ref = outs["dispatch"].float()
        line = f"{m}x{n}x{k}: dispatch {us['dispatch']:.1f} us ({2 * m * n * k / us['dispatch'] / 1e6:.0f} TFLOP/s)"
        for nm in CONFIGS:
            d = float((outs[nm].float() - ref).norm() / ref.norm())
            line += f" | {nm} {us[nm]:.1f} ({2 * m * n * k / us[nm] / 1e6:.0f}, diff {d:.0e})"
        print(line, flush=True)


if __name__ == "__main__":
    main()
