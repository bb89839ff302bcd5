"""Lab (issue 29): the grouped GEMMs of the MoE layer at prefill size with a consumer warpgroup
whose 64 rows all lie past its group's end skipping its work on every tile (MODE=skip: the
general kernel's ``lone_tile`` rule patched to true at compile time in this process), against the
shipped rule (MODE=none: only a group's single tile skips). Cases: V4-Flash L1 / L2 and V4-Pro L1
(contiguous layout) at 8192 tokens with uniform and skewed routing and with every expert holding
160 / 192 rows; the 128-row general tiles with fp32 out (the layer's L1 today) and bf16 out, and
the 192-row wg3 tiles. Writes {label: us} (CUPTI, L2 flushed, median of ITERS rounds in turns).
RUN=1: each general fp32 case once after a warm-up, for ncu (dram__bytes_read.sum).
Usage: MODE=skip python lab/moe_skip.py OUT.json"""
import json
import os
import sys

import cupy
import numpy as np

from fp8gemm import compiler
from fp8gemm.bench.moe import fp8_bytes, route
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.grouped import run_grouped

MODE = os.environ.get("MODE", "none")
RULE = "const bool lone_tile = !kGrouped || tile_prefix[t.group + 1] - tile_prefix[t.group] == 1;"
_flatten = compiler.flatten


def patched(variant):
    s = _flatten(variant)
    if MODE == "skip" and variant == "sm90_fp8_gemm_general":
        assert s.count(RULE) == 1, "the lone-tile rule moved"
        s = s.replace(RULE, "const bool lone_tile = true;")
    return s


compiler.flatten = patched
LAYERS = [("flash L1", 256, 4096, 4096), ("flash L2", 256, 4096, 2048), ("pro L1", 384, 6144, 7168)]


def main(out):
    grng = cupy.random.RandomState(5)
    rng = np.random.default_rng(7)
    fns = {}
    keep = []
    run_only = os.environ.get("RUN") == "1"
    for name, experts, n, k in LAYERS:
        w = fp8_bytes((experts, n, k), grng)
        s = cupy.full((experts, n // 128, k // 128), 1.0 / (64 * k ** 0.5), dtype=cupy.float32)
        cases = {routing: np.bincount(route(rng, 8192, experts, routing).reshape(-1), minlength=experts)
                 for routing in ("uniform", "skewed")}
        if not run_only:
            cases.update({f"{r} each": np.full(experts, r) for r in (160, 192)})
        for label, counts in cases.items():
            rows = int(counts.sum())
            a = fp8_bytes((rows, k), grng)
            sa = cupy.full((rows, k // 128), 1.0 / 64, dtype=cupy.float32)
            offsets = cupy.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
            kinds = (("general", "float32", False),) if run_only else \
                (("general", "float32", False), ("general", "bfloat16", False), ("wg3", "bfloat16", True))
            for kind, dt, wg3 in kinds:
                o = cupy.empty((rows, n), dtype=dt)
                keep.append((a, sa, offsets, o))
                fns[f"{name} {label} {kind} {dt}"] = (
                    lambda a=a, sa=sa, off=offsets, o=o, w=w, s=s, wg3=wg3:
                    run_grouped(a, w, sa, s, off, "offsets", False, None, o, (128, 128), None, False, wg3))
        keep.append((w, s))
    for f in fns.values():
        f()
    cupy.cuda.Device().synchronize()
    if run_only:
        cupy.cuda.nvtx.RangePush("prof")
        for f in fns.values():
            f()
        cupy.cuda.Device().synchronize()
        cupy.cuda.nvtx.RangePop()
        print(MODE, "ran", len(fns))
        return
    us = time_calls(fns, L2Flush(), int(os.environ.get("ITERS", "5")))
    with open(out, "w") as fh:
        json.dump(us, fh, indent=1)
    print(MODE, len(us), "timed")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/dev/null")
