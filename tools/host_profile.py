"""Profile the host path of fp8gemm.matmul (CuPy and torch callers): time per call, a breakdown
by stage of the cached fast path, and the top functions by own time.

    python tools/host_profile.py   (fp8gemm installed, editable in a checkout)"""
import cProfile
import pstats

import cupy

import fp8gemm
from fp8gemm import api, driver, launcher, output, plans
from fp8gemm.bench.cli import host_batched_us, host_overhead_us
from fp8gemm.testing import random_case

case = random_case(64, 4096, 4096, seed=0)
args = (case.a, case.b, case.a_scale, case.b_scale)


def loop(n, fn):
    return host_overhead_us(fn, calls=n)


def runner_name(r):
    return f"grid {r.grid}, splits {r.splits}, tma_store {r.tma_store}"


per_call_us = host_batched_us


print(f"cupy caller: {loop(200, lambda: fp8gemm.matmul(*args)):.1f} us/call "
      f"(batched: {per_call_us(lambda: fp8gemm.matmul(*args)):.1f})")
out = cupy.empty((64, 4096), dtype=cupy.float16)
print(f"cupy caller, out=: {loop(200, lambda: fp8gemm.matmul(*args, out=out)):.1f} us/call "
      f"(batched: {per_call_us(lambda: fp8gemm.matmul(*args, out=out)):.1f})")
print(f"  dispatch: {runner_name(plans.PLANS[plans.plan_key("matmul", api.CUPY, None, *args)][1])}")
try:
    import torch
    targs = tuple(torch.from_dlpack(x) for x in args)
    targs = (targs[0].view(torch.float8_e4m3fn), targs[1].view(torch.float8_e4m3fn)) + targs[2:]
    print(f"torch caller: {loop(200, lambda: fp8gemm.matmul(*targs)):.1f} us/call")
except ImportError:
    pass

# Stage breakdown of the cached fast path (each stage alone, in a loop; launches are real).
key = plans.plan_key("matmul", api.CUPY, None, *args)
problem, runner, _ = plans.PLANS[key]
stream_for = output.stream_for_framework(api.CUPY)
res, ptr = output.allocate(api.CUPY, problem.out_shape, problem.out_dtype, problem.device)
sp = stream_for(0)
rows = [
    ("framework_of", lambda: api.framework_of(args[0])),
    ("plan key (4 signatures)", lambda: plans.plan_key("matmul", api.CUPY, None, *args)),
    ("stream_for", lambda: stream_for(0)),
    ("output.allocate", lambda: output.allocate(api.CUPY, problem.out_shape, problem.out_dtype, 0)),
    ("runner.run (launch)", lambda: runner.run(ptr, sp)),
    ("  launcher.launch", lambda: launcher.launch(0, runner.launch_prefix, sp, runner.params.address)),
    ("  split_workspace", lambda: launcher.split_workspace(0, sp, runner.ws_floats, runner.num_tiles)),
    ("cupy.empty fp16", lambda: cupy.empty((64, 4096), dtype=cupy.float16)),
    ("cupy.empty bf16", lambda: cupy.empty((64, 4096), dtype=output.NP_DTYPES["bfloat16"])),
    ("driver.has_context", driver.has_context),
    ("cupy getDevice", cupy.cuda.runtime.getDevice),
]
# A small kernel's launch for comparison (the quantizer: 7 scalar arguments, no shared memory).
from fp8gemm import compiler, quantize  # noqa: E402
xq = cupy.ones((1, 128), dtype=cupy.float32)
qq, sq = quantize.quantize_per_token_group(xq)
qk = compiler.get_kernel(0, "quantize_per_token_group", (2, 1), 0)
qparams = launcher.KernelParams((("u64", xq.data.ptr), ("i64", 128), ("u64", qq.data.ptr), ("u64", sq.data.ptr),
                                 ("u32", 1), ("u32", 128), ("f32", 1e-10)))
qprefix = driver.launch_args(qk.kernel.ptr, 1, 256, 0)
rows.append(("small kernel: launch_prebuilt", lambda: driver.launch_prebuilt(qprefix, sp, qparams.address)))
rows.append(("general: launch_prebuilt", lambda: driver.launch_prebuilt(runner.launch_prefix, sp,
                                                                         runner.params.address)))
# The floor of any Python fast path on this machine: allocate the output, launch the prebuilt kernel.
from cupy_backends.cuda.api.driver import launchKernel  # noqa: E402
lp = runner.launch_prefix
rows.append(("floor: cupy.ndarray + launchKernel",
             lambda: (cupy.ndarray((64, 4096), output.NP_DTYPES["bfloat16"]),
                      launchKernel(*lp, sp, runner.params.address, 0))))
for name, fn in rows:
    print(f"  {name:28} {per_call_us(fn, 1000):6.2f} us")
    cupy.cuda.Device().synchronize()
# Does a finished torch.profiler (kineto / CUPTI) session leave launches slower? fp8gemm-bench
# times with one before it measures its host column.
try:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]):
        for _ in range(10):
            fp8gemm.matmul(*args)
        cupy.cuda.Device().synchronize()
    print(f"cupy caller after a torch.profiler session: {loop(200, lambda: fp8gemm.matmul(*args)):.1f} us/call "
          f"(batched: {per_call_us(lambda: fp8gemm.matmul(*args)):.1f})")
    print(f"  general: launch_prebuilt after it: {per_call_us(rows[-1][1], 1000):.2f} us")
except ImportError:
    pass
prof = cProfile.Profile()
prof.enable()
for _ in range(200):
    fp8gemm.matmul(*args)
prof.disable()
cupy.cuda.Device().synchronize()
pstats.Stats(prof).sort_stats("tottime").print_stats(14)
