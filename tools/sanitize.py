"""Correctness run for compute-sanitizer (memcheck, racecheck, synccheck, initcheck): every kernel
path once on small shapes with M, N and K tails, each checked against the float64 reference.

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 tools/sanitize.py

Exit status 1 if an output is wrong; the sanitizer's own exit code reports what it found."""
import sys

import cupy

import fp8gemm
from fp8gemm import reference
from fp8gemm.dispatch import Candidate
from fp8gemm.testing import as_float64, random_case

G = "sm90_fp8_gemm_general"
TOL = {"bfloat16": 4e-3, "float16": 1e-3, "float32": 1e-4}
CASES = [   # (M, N, K, out dtype, candidate or None for the dispatcher, what it covers)
    (200, 300, 1040, "bfloat16", Candidate(G, 128, 4, 8), "two accumulators, TMA store, M/N/K tails"),
    (200, 300, 1040, "float32", Candidate(G, 128, 4, 8), "fine promotion (fp32), TMA store"),
    (130, 200, 2064, "float16", Candidate(G, 32, 4, 8, splits=4), "split-K, direct store"),
    (100, 256, 272, "bfloat16", Candidate(G, 64, 4, 8, splits=4), "empty K splits"),
    (5, 300, 1040, "bfloat16", Candidate(G, 8, 4, 8, splits=3, swap_ab=True), "swap-AB split-K"),
    (64, 4096, 4096, "bfloat16", None, "dispatcher's pick"),
]


def main() -> int:
    bad = 0
    for m, n, k, dt, cand, what in CASES:
        case = random_case(m, n, k, seed=m + n + k)
        out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=dt, config=cand)
        cupy.cuda.Device().synchronize()
        err = reference.rel_fro_error(as_float64(out), case.reference(cupy))
        ok = err <= TOL[dt]
        bad += not ok
        print(f"{'ok  ' if ok else 'BAD '} M={m} N={n} K={k} {dt:8} err {err:.2e}  {what}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
