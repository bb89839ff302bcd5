"""Lab: why the 256-row tiles run slower per FLOP than wg3's 192-row ones (issues 27, 29). The
tall kernel's source is patched in this process (PATCH, comma-separated; none: as committed):
  both      both waves always run (dense shapes only: grouped rows past a group would be read)
DENSE_ONLY=1 leaves the grouped shapes out.
and timed against wg3 (the committed form, when patched, is not in the process: compare the
tall / wg3 ratio across processes); Tall's knobs run side by side: the scales by slots and by
the consumers' loads (scale_slots), the K loop per wave count and one loop (one_loop). Shapes: dense bf16 at 4096 / 8192 rows (DeepGEMM's
fp8_gemm_nt beside them when importable), and V4-Flash L1 (fp32 out, coarse) and L2 (fp16 out) at
256 rows per expert and 8192 tokens routed uniformly, grouped, against General and Wg3. CUPTI, L2 flushed, median of ITERS rounds in turns.
Usage: PATCH=both python lab/tall_variants.py OUT.json"""
import json
import os
import sys

import cupy
import numpy as np

import fp8gemm
from fp8gemm import compiler
from fp8gemm.bench.moe import fp8_bytes, route
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import General, Tall, Wg3
from fp8gemm.grouped import run_grouped
from fp8gemm.testing import random_case

PATCHES = {
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
        for label, c in (("wg3", Wg3(128, 3, 8)), ("tall3", Tall(128, 3, 8)), ("tall3g1", Tall(128, 3, 1)),
                         ("tall3loads", Tall(128, 3, 8, 0)), ("tall3oneloop", Tall(128, 3, 8, 1, 1)),
                         ("tall3loadsoneloop", Tall(128, 3, 8, 0, 1))):
            fns[f"{m}x{n}x{k} {label}"] = (lambda case=case, c=c:
                                            fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=c))
        try:
            import deep_gemm  # noqa: F401

            from fp8gemm.bench.peers import Inputs, prepare_deepgemm
            fns[f"{m}x{n}x{k} deepgemm"] = prepare_deepgemm(Inputs(case, "bfloat16"))["fp8_gemm_nt"]
        except ImportError:                # not built in this process
            pass
    grng = cupy.random.RandomState(5)
    for gemm, experts, n, k, dt in () if os.environ.get("DENSE_ONLY") or "both" in PATCH else (("flashL1", 256, 4096, 4096, "float32"), ("flashL2", 256, 4096, 2048, "float16")):
        w = fp8_bytes((experts, n, k), grng)
        s = cupy.full((experts, n // 128, k // 128), 1.0 / (64 * k ** 0.5), dtype=cupy.float32)
        keep.append((w, s))
        uniform = np.bincount(route(np.random.default_rng(7), 8192, experts, "uniform").reshape(-1), minlength=experts)
        for routing, counts in (("256each", np.full(experts, 256)), ("uniform", uniform)):
            rows = int(counts.sum())
            a = fp8_bytes((rows, k), grng)
            sa = cupy.full((rows, k // 128), 1.0 / 64, dtype=cupy.float32)
            offsets = cupy.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
            o = cupy.empty((rows, n), dtype=getattr(cupy, dt))
            keep.append((a, sa, offsets, o))
            for label, c in (("general", General(128, 4 if dt == "float32" else 5, 8)), ("wg3", Wg3(128, 4, 8)),
                             ("tall", Tall(128, 4, 8)), ("tallloads", Tall(128, 4, 8, 0)),
                             ("talloneloop", Tall(128, 4, 8, 1, 1))):
                fns[f"{gemm} {routing} {label}"] = (lambda a=a, w=w, s=s, sa=sa, offsets=offsets, o=o, c=c:
                                                    run_grouped(a, w, sa, s, offsets, "offsets", False, None, o,
                                                                (128, 128), None, False, config=c))
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
