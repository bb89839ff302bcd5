"""Lab: which of the general kernel's three scale loads per K block cost the time, by source
patches applied at compile time in this process (the results are wrong: timing only). MODE:
none; noa (As replaced by constants: no As loads, the pointer steps left to the compiler); nob
(Bs replaced); noscale (both). The constants change by 1e-30 per block, so a dependency chain
and the FMULs stay. Writes {label: us} (CUPTI, L2 flushed, 30 rounds in turns). DG=1 adds
DeepGEMM. Usage: MODE=nob python lab/ablate_scales.py OUT.json"""
import json
import os
import sys

import torch

import fp8gemm
from fp8gemm import compiler
from fp8gemm.bench.peers import Inputs, prepare_deepgemm
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import GemmDesc, is_valid
from fp8gemm.dispatch import selector as sel
from fp8gemm.testing import random_case

MODE = os.environ.get("MODE", "none")
FIRST = "float a0 = *pa0, a1 = *pa1, b0 = *pb;"
NEXT = "a0 = *pa0; a1 = *pa1; b0 = *pb;"
PATCHES = {
    "none": [],
    "noa": [(FIRST, "float a0 = 1.0f, a1 = 1.0f, b0 = *pb;"), (NEXT, "a0 += 1e-30f; a1 += 1e-30f; b0 = *pb;")],
    "nob": [(FIRST, "float a0 = *pa0, a1 = *pa1, b0 = 1.0f;"), (NEXT, "a0 = *pa0; a1 = *pa1; b0 += 1e-30f;")],
    "noscale": [(FIRST, "float a0 = 1.0f, a1 = 1.0f, b0 = 1.0f;"), (NEXT, "a0 += 1e-30f; a1 += 1e-30f; b0 += 1e-30f;")],
}[MODE]
_flatten = compiler.flatten


def patched(variant):
    s = _flatten(variant)
    if variant == "sm90_fp8_gemm_general":
        for old, new in PATCHES:
            assert s.count(old) == 1, (MODE, old)
            s = s.replace(old, new)
    return s


compiler.flatten = patched
G = "sm90_fp8_gemm_general"


def gen(bn, st, bm=128):
    return {"variant": G, "block_n": bn, "stages": st, "group_m": 8, "splits": 1, "block_m": bm}


CASES = [((64, 4096, 4096), [gen(32, 8, 64), gen(32, 16, 64)]),
         ((128, 4096, 4096), [gen(64, 6, 64), gen(64, 13, 64)]),
         ((256, 1536, 4096), [gen(64, 6, 64)]),
         ((512, 4096, 4096), [gen(128, 5)]),
         ((4096, 4096, 4096), [gen(128, 5), gen(128, 6)])]


def main(out):
    fns = {}
    for (m, n, k), cfgs in CASES:
        case = random_case(m, n, k, seed=1)
        a, b, sa, sb = case.as_torch()
        for e in cfgs:
            c = sel.from_entry(e)
            if is_valid(GemmDesc(m, n, k), c):
                fns[f"{m}x{n}x{k} {c.label()}"] = lambda a=a, b=b, sa=sa, sb=sb, c=c: fp8gemm.matmul(a, b, sa, sb, config=c)
        if os.environ.get("DG") == "1":
            d = prepare_deepgemm(Inputs(case, "bfloat16"))
            if isinstance(d, dict):
                fns[f"{m}x{n}x{k} deepgemm"] = d["fp8_gemm_nt"]
    for f in fns.values():
        f()
    torch.cuda.synchronize()
    with open(out, "w") as fh:
        json.dump(time_calls(fns, L2Flush(), 30), fh, indent=1)
    print(MODE, len(fns), "timed")


if __name__ == "__main__":
    main(sys.argv[1])
