"""Lab: why the 256-row tiles run slower per FLOP than wg3's 192-row ones (issues 27, 29). The
tall kernel's source is patched in this process (PATCH, comma-separated; none: as committed):
  unroll2   the K loop unrolled by 2 (the next block's scales land in alternating registers, no
            register moves at the back edge, as wg3 and the general kernel's lean loop)
  noscale   no scale loads in the K loop (every scale 1.0: the ablation of the scale path)
  both      both waves always run (no live-wave test in the loop; dense shapes only)
and timed against wg3 (and the committed form, when patched, is not in the process: compare the
tall / wg3 ratio across processes). Shapes: dense bf16 at 4096 / 8192 rows, and V4-Flash L2 at
256 rows per expert (grouped, bf16). CUPTI, L2 flushed, median of ITERS rounds in turns.
Usage: PATCH=unroll2 python lab/tall_variants.py OUT.json"""
import json
import os
import sys

import cupy
import numpy as np

import fp8gemm
from fp8gemm import compiler
from fp8gemm.bench.moe import fp8_bytes
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import Tall, Wg3
from fp8gemm.grouped import run_grouped
from fp8gemm.testing import random_case

PATCHES = {
    "unroll2": [("            for (uint32_t kb = w.kb_begin; kb < w.kb_end; ++kb, ++pipe) {\n                // Next block's",
                 "#pragma unroll 2\n            for (uint32_t kb = w.kb_begin; kb < w.kb_end; ++kb, ++pipe) {\n"
                 "                // Next block's")],
    "noscale": [("const float na00 = *pa00, na01 = *pa01, na10 = *pa10, na11 = *pa11, nb0 = *pb;",
                 "const float na00 = 1.0f, na01 = 1.0f, na10 = 1.0f, na11 = 1.0f, nb0 = 1.0f;")],
    "both": [("const bool live1 = wg_row1 < row_limit;", "const bool live1 = true;")],
}
PATCH = [p for p in os.environ.get("PATCH", "none").split(",") if p != "none"]
_flatten = compiler.flatten


def patched(variant):
    s = _flatten(variant)
    if variant == Tall.variant:
        for name in PATCH:
            for old, new in PATCHES[name]:
                assert s.count(old) == 1, f"patch {name}: its anchor moved"
                s = s.replace(old, new)
    return s


compiler.flatten = patched


def main(out):
    fns, keep = {}, []
    for m, n, k in ((4096, 8192, 4096), (8192, 8192, 4096)):
        case = random_case(m, n, k, seed=1)
        keep.append(case)
        for label, c in (("wg3", Wg3(128, 3, 8)), ("tall3", Tall(128, 3, 8)), ("tall4", Tall(128, 4, 8))):
            fns[f"{m}x{n}x{k} {label}"] = (lambda case=case, c=c:
                                            fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=c))
    if "both" not in PATCH:
        grng = cupy.random.RandomState(5)
        experts, n, k = 256, 4096, 2048                       # V4-Flash L2
        w = fp8_bytes((experts, n, k), grng)
        s = cupy.full((experts, n // 128, k // 128), 1.0 / (64 * k ** 0.5), dtype=cupy.float32)
        counts = np.full(experts, 256)
        rows = int(counts.sum())
        a = fp8_bytes((rows, k), grng)
        sa = cupy.full((rows, k // 128), 1.0 / 64, dtype=cupy.float32)
        offsets = cupy.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
        o = cupy.empty((rows, n), dtype=cupy.float16)
        keep.append((w, s, a, sa, offsets, o))
        for label, c in (("wg3", Wg3(128, 4, 8)), ("tall", Tall(128, 4, 8))):
            fns[f"flashL2 256each {label}"] = (lambda c=c: run_grouped(a, w, sa, s, offsets, "offsets", False, None, o,
                                                                       (128, 128), None, True, config=c))
    for f in fns.values():
        f()
    cupy.cuda.Device().synchronize()
    us = time_calls(fns, L2Flush(), int(os.environ.get("ITERS", "9")))
    tag = "+".join(PATCH) or "none"
    for label, v in us.items():
        print(f"{tag:16} {label:36} {v:9.1f}")
    with open(out, "w") as fh:
        json.dump(us, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
