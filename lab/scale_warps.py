"""Lab (issue 27): the general kernel's As through shared-memory slots that the producer
warpgroup's other warps fill from global memory (General's scale_warps knob, kScaleWarpsA),
against the consumers' own loads of the same K-major As (the quantizer's default layout), on the
trace's mid-M shapes where DeepGEMM leads, each with the dispatcher's tile and with DeepGEMM's
(bench/results/deepgemm_configs_h200.csv); DeepGEMM's fp8_gemm_nt beside them when importable.
CUPTI, L2 flushed, median of ITERS rounds in turns, one process. Prints one line per contender and
writes {label: us}. Usage: python lab/scale_warps.py OUT.json"""
import json
import os
import sys
from dataclasses import replace

import torch

import fp8gemm
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import GemmDesc, General, is_valid, select
from fp8gemm.testing import random_case

# (shape, DeepGEMM's tile as ours: General(block_n, stages, group_m, splits, block_m))
CASES = [((64, 4096, 4096), General(32, 16, 8, 1, 64)), ((64, 8192, 1024), General(64, 12, 8, 1, 64)),
         ((100, 4096, 4096), General(64, 13, 8, 1, 64)), ((128, 4096, 4096), General(64, 13, 8, 1, 64)),
         ((256, 1536, 4096), General(32, 16, 8, 1, 64)), ((256, 4096, 4096), General(128, 8, 8, 1, 64)),
         ((512, 4096, 4096), General(128, 5)), ((4096, 4096, 4096), General(128, 5))]


def main(out):
    fns, keep = {}, []
    try:
        import deep_gemm  # noqa: F401

        from fp8gemm.bench.peers import Inputs, prepare_deepgemm
    except ImportError:                    # not built in this process
        prepare_deepgemm = None
    for (m, n, k), dg_tile in CASES:
        case = random_case(m, n, k, seed=1)
        keep.append(case)
        a, b, sa, sb = case.as_torch()
        chosen = select(m, n, k)
        tiles = {"dg-tile": dg_tile}
        if isinstance(chosen, General) and type(chosen) is General:
            tiles["chosen"] = chosen
        for name, c in tiles.items():
            for warps in (0, 1):
                cfg = replace(c, scale_warps=warps, reason="")
                if not is_valid(GemmDesc(m, n, k), cfg):
                    continue
                fns[f"{m}x{n}x{k} {name} {cfg.label()}"] = (lambda a=a, b=b, sa=sa, sb=sb, cfg=cfg:
                                                           fp8gemm.matmul(a, b, sa, sb, config=cfg))
        if prepare_deepgemm is not None:
            fns[f"{m}x{n}x{k} deepgemm"] = prepare_deepgemm(Inputs(case, "bfloat16"))["fp8_gemm_nt"]
    for f in fns.values():
        f()
    torch.cuda.synchronize()
    us = time_calls(fns, L2Flush(), int(os.environ.get("ITERS", "20")))
    for label, v in us.items():
        print(f"{label:70} {v:9.2f}")
    with open(out, "w") as fh:
        json.dump(us, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
