"""fp8gemm.precompile on the GPU: a model's (N, K) pairs over several token counts compile in
worker processes with no failure, and the process's own first calls then load them from the
disk cache (no NVRTC run of their own)."""
import time

import pytest

from generators import random_case

import fp8gemm

pytestmark = pytest.mark.gpu


def test_precompile_then_first_calls_load_from_the_cache(tmp_path, monkeypatch):
    import cupy
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "cache"))       # a cold cache, shared with the workers
    nk = [(4096, 7168), (7168, 2048)]
    report = fp8gemm.precompile(nk=nk, m=[1, 64, 512], workers=2, progress=False)
    assert report["failed"] == {} and report["kernels"] >= 2 and report["shapes"] == 6, report
    cached = list((tmp_path / "cache").iterdir())
    assert cached, "the workers wrote nothing to the kernel cache"
    from fp8gemm import compiler
    monkeypatch.setattr(compiler, "_kernels", {})
    # the operands first: CuPy's own kernels (its random generator's) compile into the cold cache
    # too, and are not what this test times
    cases = [(m, n, random_case(m, n, k, seed=m + n)) for m in (1, 64, 512) for n, k in nk]
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for m, n, case in cases:
        got = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale)
        assert got.shape == (m, n)
    cupy.cuda.Device().synchronize()
    assert time.perf_counter() - start < 5.0, "first calls after precompile took as long as compiling"
