"""Why the first calls after fp8gemm.precompile compiled (tests/test_precompile_gpu.py failed on
the H100, session 50: 23 s of first calls after a 24 s precompile). Runs the test's steps in a
fresh process and says, per call, which kernels it loaded and whether NVRTC ran.
    python3 lab/precompile_probe.py
"""
import os
import tempfile
import time

os.environ["CUPY_CACHE_DIR"] = tempfile.mkdtemp(prefix="probe_cache_")
import cupy
import cupy.cuda.compiler as cc

import fp8gemm
from fp8gemm import compiler
from fp8gemm.compile_ahead import plan_jobs, shapes_of
from fp8gemm.launcher import gpu_key, sm_count
from fp8gemm.testing import random_case

nk = [(4096, 7168), (7168, 2048)]
ms = [1, 64, 512]
dev = cupy.cuda.Device().id
jobs = plan_jobs(shapes_of(nk=nk, m=ms), "bfloat16", gpu_key(dev), sm_count(dev))
for j in jobs:
    print("job", j["m"], j["n"], j["k"], j["kernel"])
t0 = time.perf_counter()
report = fp8gemm.precompile(nk=nk, m=ms, workers=2, progress=False)
print("precompile", round(time.perf_counter() - t0, 1), "s", report)
worker_keys = set()
compiles = []
real = cc.compile_using_nvrtc


def counting(source, *args, **kwargs):
    compiles.append(source[:200].split("\n")[:4])
    return real(source, *args, **kwargs)


cc.compile_using_nvrtc = counting
compiler._kernels.clear()
for m in ms:
    for n, k in nk:
        nc0, t = len(compiles), time.perf_counter()
        case = random_case(m, n, k, seed=m + n)
        cupy.cuda.Device().synchronize()
        print(f"case {m}x{n}x{k}: {time.perf_counter() - t:.2f} s, nvrtc {len(compiles) - nc0} (CuPy's own kernels)")
        before, nc = set(compiler._kernels), len(compiles)
        t = time.perf_counter()
        fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale)
        cupy.cuda.Device().synchronize()
        dt = time.perf_counter() - t
        new = [key for key in compiler._kernels if key not in before]
        print(f"call {m}x{n}x{k}: {dt:.2f} s, nvrtc {len(compiles) - nc}, kernels {[(k_[1], k_[2], k_[3].count('define')) for k_ in new]}")
        try:
            print("   pick:", str(fp8gemm.explain(m, n, k)).replace("\n", " | ")[:240])
        except Exception as exc:                        # noqa: BLE001 (a probe: say why and go on)
            print("   pick: explain raised", exc)
print("nvrtc compiles in the first cases and calls:", len(compiles))
for src in compiles:
    print("  compiled:", " / ".join(src)[:160])
