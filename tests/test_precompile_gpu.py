"""fp8gemm.precompile on the GPU: a model's (N, K) pairs over several token counts compile in
worker processes with no failure, and the process's own first calls then load them from the
disk cache (no NVRTC run of their own)."""
import time

import pytest

from generators import random_case

import fp8gemm

pytestmark = pytest.mark.gpu


def test_precompile_then_first_calls_load_from_the_cache(tmp_path, monkeypatch):
    """A cold cache of the test's own for this process and the workers: CuPy 14 fixes its cache
    directory at import, so the process's cache is replaced (not only CUPY_CACHE_DIR set), and
    precompile hands its workers the one this process reads (compiler.kernel_cache_dir; session 50
    and 51's suites: the workers compiled into CUPY_CACHE_DIR, the process read the suite's cache
    and compiled again). No first call may add a cache entry: a time bound failed under the
    suite's 8 workers sharing the GPU, an entry written is a compile whatever the load."""
    import cupy
    import cupy.cuda.compiler as cc
    from fp8gemm import compiler
    cache = tmp_path / "cache"
    monkeypatch.setenv("CUPY_CACHE_DIR", str(cache))
    if hasattr(cc, "_kernel_cache_backend"):
        monkeypatch.setattr(cc, "_kernel_cache_backend", type(cc._kernel_cache_backend)(str(cache)))
    assert compiler.kernel_cache_dir() == str(cache)
    nk = [(4096, 7168), (7168, 2048)]
    report = fp8gemm.precompile(nk=nk, m=[1, 64, 512], workers=2, progress=False)
    assert report["failed"] == {} and report["kernels"] >= 2 and report["shapes"] == 6, report
    assert list(cache.iterdir()), "the workers wrote nothing to the kernel cache"
    monkeypatch.setattr(compiler, "_kernels", {})
    # the operands first: CuPy's own kernels (its random generator's) compile into the cold cache
    # too, and are not what this test watches
    cases = [(m, n, random_case(m, n, k, seed=m + n)) for m in (1, 64, 512) for n, k in nk]
    cupy.cuda.Device().synchronize()
    entries = set(cache.iterdir())
    start = time.perf_counter()
    for m, n, case in cases:
        got = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale)
        assert got.shape == (m, n)
    cupy.cuda.Device().synchronize()
    seconds = time.perf_counter() - start
    new = sorted(p.name for p in set(cache.iterdir()) - entries)
    assert not new, f"the first calls after precompile compiled {len(new)} kernels ({seconds:.1f} s): {new}"
    assert len(compiler._kernels) >= report["kernels"], "the calls loaded fewer kernels than precompile built"
