"""Correctness run for compute-sanitizer (memcheck, racecheck, synccheck, initcheck): every kernel
path once on small shapes with M, N and K tails, each checked against the float64 reference.

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 tools/sanitize.py [--quantizer-only]

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
    (37, 200, 528, "float32", Candidate(G, 16, 4, 8, swap_ab=True), "swap-AB, fine promotion"),
    (3, 1000, 2064, "float16", Candidate(G, 16, 3, 1, splits=16), "split-K, 16 splits, N tail"),
    (64, 4096, 4096, "bfloat16", None, "dispatcher's pick"),
    (200, 300, 240, "bfloat16", Candidate("sm90_fp8_gemm_short_k", 128, 2, 1, block_m=128),
     "short-K, two K blocks (second partial), TMA store, M/N tails"),
    (70, 100, 112, "float32", Candidate("sm90_fp8_gemm_short_k", 32, 2, 1, block_m=64),
     "short-K, one K block, fine promotion, direct store"),
]


def quantizer_cases() -> int:
    """The activation quantizer's vector path (K % 128 == 0) and element path (K tail), every input
    dtype, against the host reference bit for bit."""
    import numpy as np
    bad = 0
    for rows, k, dt in [(37, 1024, cupy.float16), (5, 200, cupy.float32), (64, 7168, cupy.float32),
                        (9, 384, "bfloat16"), (301, 128 * 119, "bfloat16")]:   # last: the big-input path
        x32 = cupy.random.default_rng(rows + k).standard_normal((rows, k), dtype=cupy.float32)
        if dt == "bfloat16":      # CuPy has no bf16: go through torch
            import torch
            x = torch.from_dlpack(x32).to(torch.bfloat16)
            host = x.float().cpu().numpy()
        else:
            x = x32.astype(dt)
            host = x.get()
        q, s = fp8gemm.quantize_per_token_group(x)
        cupy.cuda.Device().synchronize()
        rq, rs = reference.quantize_per_token_group(host.astype(np.float32))
        qb = cupy.asarray(q).view(cupy.uint8).get() if not hasattr(q, "cpu") else q.view(torch.uint8).cpu().numpy()
        sg = cupy.asarray(s).get() if not hasattr(s, "cpu") else s.cpu().numpy()
        ok = np.array_equal(qb, rq.view(np.uint8)) and np.array_equal(sg, rs)
        bad += not ok
        print(f"{'ok  ' if ok else 'BAD '} quantize rows={rows} K={k} {np.dtype(dt).name if dt != 'bfloat16' else dt}",
              flush=True)
    return bad


def main() -> int:
    bad = quantizer_cases()
    if "--quantizer-only" in sys.argv:
        return 1 if bad else 0
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
