"""Quick GPU smoke check: compile, run a few shapes through every framework path, print errors.

Usage: python tools/smoke.py   (on an SM90 machine)
"""
import sys
import time

sys.path.insert(0, "tests")

import cupy  # noqa: E402

import fp8gemm  # noqa: E402
from fp8gemm import reference  # noqa: E402
from generators import random_case, to_cupy_f64  # noqa: E402

print("device:", cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), flush=True)
probe = cupy.empty(4, dtype=reference.BFLOAT16)
print("cupy bf16 alloc ok:", probe.dtype, flush=True)
for m, n, k, dt in [(128, 128, 128, "float32"), (1, 1, 16, "float32"), (300, 520, 1040, "bfloat16"),
                    (4096, 4096, 4096, "bfloat16")]:
    case = random_case(m, n, k, seed=1)
    t0 = time.time()
    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=dt)
    cupy.cuda.Device().synchronize()
    t1 = time.time()
    ref = case.reference(cupy)
    got = to_cupy_f64(out)
    print(f"M={m} N={n} K={k} {dt}: rel_err={reference.rel_fro_error(got, ref):.3e} "
          f"calc_diff={reference.calc_diff(got, ref):.3e} first-call {t1 - t0:.2f}s "
          f"|ref| max {float(abs(ref).max()):.3f}", flush=True)
