"""GPU, concurrency and caches: several threads and several streams calling at once give
correct results, split-K included (workspaces are per stream, argument blocks per plan under a
lock); two processes compiling into one empty kernel cache at once both succeed, and a third
process then loads from that cache and computes the right result."""
import os
import subprocess
import sys
import threading

import pytest

from generators import random_case

import fp8gemm
from fp8gemm import reference
from fp8gemm.dispatch import General, SwapAB
from fp8gemm.testing import as_float64

pytestmark = pytest.mark.gpu



def _err(out, ref):
    return reference.rel_fro_error(as_float64(out), ref)


def test_threads_each_on_its_own_stream():
    """8 threads x 20 calls, each thread on its own non-blocking stream. Threads 0-3 share one
    problem (same inputs: one cached plan and argument block, one workspace per stream; split-K
    forced), threads 4-7 have their own shapes (dispatcher). Every result is checked."""
    import cupy
    shared = random_case(24, 1000, 2048, seed=31)
    shared_ref = shared.reference(cupy)
    own = [random_case(1 + 37 * i, 512 + 128 * i, 1024, seed=40 + i) for i in range(4)]
    own_refs = [c.reference(cupy) for c in own]
    split = General(32, 4, 8, splits=4)
    errors, worst = [], [0.0] * 8
    barrier = threading.Barrier(8)

    def work(i):
        try:
            stream = cupy.cuda.Stream(non_blocking=True)
            with stream:
                barrier.wait()
                for _ in range(20):
                    if i < 4:
                        c, ref, cfg = shared, shared_ref, split
                    else:
                        c, ref, cfg = own[i - 4], own_refs[i - 4], None
                    out = fp8gemm.matmul(c.a, c.b, c.a_scale, c.b_scale, config=cfg)
                    stream.synchronize()
                    worst[i] = max(worst[i], _err(out, ref))
        except Exception as exc:            # reported below, with the thread's index
            errors.append(f"thread {i}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, errors
    assert max(worst) <= 4e-3, f"worst relative error per thread: {worst}"


def test_many_streams_from_one_thread_without_syncs():
    """Split-K launches alternate over 4 streams with no sync in between; every output is
    checked after one final sync (a shared workspace would mix partial sums)."""
    import cupy
    cases = [random_case(8 + i, 2048, 4096, seed=50 + i) for i in range(4)]
    refs = [c.reference(cupy) for c in cases]
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(4)]
    cfg = SwapAB(16, 4, 8, splits=8)
    outs = []
    for rep in range(6):
        for i, (c, s) in enumerate(zip(cases, streams)):
            with s:
                outs.append((i, fp8gemm.matmul(c.a, c.b, c.a_scale, c.b_scale, config=cfg)))
    cupy.cuda.Device().synchronize()
    errs = [_err(out, refs[i]) for i, out in outs]
    assert max(errs) <= 4e-3, f"worst relative error {max(errs):.2e}"


_CHILD = """
import sys, cupy, fp8gemm
from fp8gemm import reference
from fp8gemm.dispatch import General, SwapAB
from fp8gemm.testing import as_float64, random_case
c = random_case(100, 300, 1040, seed=61)
out = fp8gemm.matmul(c.a, c.b, c.a_scale, c.b_scale,
                     config=General(64, 3, 4, splits=2))
err = reference.rel_fro_error(as_float64(out), c.reference(cupy))
print("err", err)
sys.exit(0 if err <= 4e-3 else 1)
"""


def test_two_processes_compile_into_one_cache_at_once(tmp_path):
    """Both processes compile the same instantiation (one not used elsewhere in the suite) into an
    empty cache at the same moment; both succeed; a third loads the cached binary."""
    env = dict(os.environ, CUPY_CACHE_DIR=str(tmp_path / "cache"))
    # cwd outside the checkout: the children import the installed package, as the suite does
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (log, _) in zip(procs, results):
        assert p.returncode == 0, log
    cached = sorted(f for f in (tmp_path / "cache").rglob("*") if f.is_file())
    assert cached, "nothing was written to the kernel cache"
    third = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=300)
    assert third.returncode == 0, third.stdout + third.stderr
    after = sorted(f for f in (tmp_path / "cache").rglob("*") if f.is_file())
    assert after == cached, "the third process compiled again instead of loading the cache"
