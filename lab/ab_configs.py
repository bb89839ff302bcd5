"""Lab: time one fixed list of (shape, candidate) pairs with this tree's fp8gemm, L2 cold, CUPTI
(bench/timing.py), and write {label: us} as JSON. Run it once per tree (PYTHONPATH=<tree>) in the
same device call to compare kernels on equal configurations. Candidates a tree cannot run (not
valid there) are skipped. A second argument ``mmajor`` passes a_scale M-major (strides (1, M)),
as DeepGEMM's callers do. AB_MAX_M=<m> keeps only the shapes with M <= m.
Usage: python lab/ab_configs.py OUT.json [mmajor]"""
import json
import os
import sys

import cupy

import fp8gemm
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import GemmDesc, is_valid
from fp8gemm.dispatch import selector as sel
from fp8gemm.testing import random_case

G, S, W = "sm90_fp8_gemm_general", "sm90_fp8_gemm_swap_ab", "sm90_fp8_gemm_wg3"


def gen(bn, st, bm=128, sp=1, g=8):
    return {"variant": G, "block_n": bn, "stages": st, "group_m": g, "splits": sp, "block_m": bm}


CASES = [
    ((64, 4096, 4096, "bfloat16"), [gen(32, 8, 64), gen(32, 16, 64), gen(64, 6, 64), gen(64, 12, 64), gen(64, 13, 64)]),
    ((64, 8192, 4096, "bfloat16"), [gen(64, 6, 64), gen(64, 12, 64), gen(64, 13, 64), gen(128, 8, 64)]),
    ((64, 8192, 1024, "bfloat16"), [gen(64, 6, 64), gen(64, 12, 64)]),
    ((128, 4096, 4096, "bfloat16"), [gen(64, 6, 64), gen(64, 12, 64), gen(32, 6)]),
    ((256, 1536, 4096, "bfloat16"), [gen(64, 6, 64), gen(64, 12, 64), gen(64, 6, sp=2)]),
    ((256, 8192, 4096, "bfloat16"), [gen(128, 4), gen(128, 5), gen(128, 6), gen(128, 8, 64)]),
    ((512, 4096, 4096, "bfloat16"), [gen(128, 4), gen(128, 5), gen(128, 6)]),
    ((512, 4096, 4096, "float32"), [gen(64, 6), gen(128, 4)]),
    ((4096, 4096, 4096, "bfloat16"), [gen(128, 5), gen(128, 6)]),
    ((8192, 8192, 4096, "bfloat16"), [gen(128, 5), gen(128, 6), {"variant": W, "block_n": 128, "stages": 3, "group_m": 8}]),
    ((16384, 8192, 4096, "bfloat16"), [{"variant": W, "block_n": 128, "stages": 3, "group_m": 8}]),
    ((16, 4096, 4096, "bfloat16"), [{"variant": S, "block_n": 16, "stages": 6, "group_m": 1, "splits": 2}]),
    ((8, 4096, 4096, "bfloat16"), [{"variant": S, "block_n": 8, "stages": 6, "group_m": 8, "splits": 3}]),
    ((4, 8192, 4096, "bfloat16"), [{"variant": S, "block_n": 8, "stages": 6, "group_m": 16, "splits": 1}]),
    ((32, 8192, 4096, "bfloat16"), [{"variant": S, "block_n": 16, "stages": 6, "group_m": 1, "splits": 1}]),
    ((32, 1536, 4096, "bfloat16"), [{"variant": S, "block_n": 16, "stages": 6, "group_m": 1, "splits": 4}]),
    ((48, 4096, 4096, "bfloat16"), [gen(32, 8, 64)]),
]


def main(out, layout="kmajor"):
    flush = L2Flush()
    fns = {}
    max_m = int(os.environ.get("AB_MAX_M", 1 << 30))
    for (m, n, k, dt), cfgs in CASES:
        if m > max_m:
            continue
        a, b, sa, sb = random_case(m, n, k, seed=1).as_torch()
        if layout == "mmajor":
            sa = sa.t().contiguous().t()
        for e in cfgs:
            c = sel.from_entry(e)
            if not is_valid(GemmDesc(m, n, k, dt), c):
                continue
            f = (lambda a=a, b=b, sa=sa, sb=sb, c=c, dt=dt: fp8gemm.matmul(a, b, sa, sb, out_dtype=dt, config=c))
            f()
            fns[f"{m}x{n}x{k} {dt[:4]} {c.label()}"] = f
    cupy.cuda.Device().synchronize()
    t = time_calls(fns, flush, 30)
    with open(out, "w") as fh:
        json.dump(t, fh, indent=1)
    print(f"{len(t)} configs -> {out}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
