"""Profile the host path of fp8gemm.matmul (CuPy and torch callers): time per call and the top
functions by own time. Usage: PYTHONPATH=. python tools/host_profile.py"""
import cProfile
import pstats

import cupy

import fp8gemm
from fp8gemm.bench.cli import host_overhead_us
from fp8gemm.testing import random_case

case = random_case(64, 4096, 4096, seed=0)
args = (case.a, case.b, case.a_scale, case.b_scale)


def loop(n, fn):
    return host_overhead_us(fn, calls=n)


print(f"cupy caller: {loop(200, lambda: fp8gemm.matmul(*args)):.1f} us/call")
out = cupy.empty((64, 4096), dtype=cupy.float16)
print(f"cupy caller, out=: {loop(200, lambda: fp8gemm.matmul(*args, out=out)):.1f} us/call")
try:
    import torch
    targs = tuple(torch.from_dlpack(x) for x in args)
    targs = (targs[0].view(torch.float8_e4m3fn), targs[1].view(torch.float8_e4m3fn)) + targs[2:]
    print(f"torch caller: {loop(200, lambda: fp8gemm.matmul(*targs)):.1f} us/call")
except ImportError:
    pass
prof = cProfile.Profile()
prof.enable()
for _ in range(200):
    fp8gemm.matmul(*args)
prof.disable()
cupy.cuda.Device().synchronize()
pstats.Stats(prof).sort_stats("tottime").print_stats(14)
