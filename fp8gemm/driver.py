"""The CUDA driver API through ctypes: tensor-map encoding and kernel launches.

No extra dependency: libcuda is present wherever a driver is. Kernel launches go straight to
cuLaunchKernel with a prebuilt parameter block (see launcher.KernelParams), which costs a few
microseconds of host time where a CuPy launch with 17 arguments costs tens.
"""
from __future__ import annotations

import ctypes

_lib = None


def lib():
    """libcuda with the prototypes fp8gemm calls (loaded on first use)."""
    global _lib
    if _lib is None:
        cu = ctypes.CDLL("libcuda.so.1")
        cu.cuTensorMapEncodeTiled.restype = ctypes.c_int
        cu.cuTensorMapEncodeTiled.argtypes = [
            ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
            ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
            ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        cu.cuLaunchKernel.restype = ctypes.c_int
        cu.cuLaunchKernel.argtypes = [
            ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
            ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        cu.cuCtxGetCurrent.restype = ctypes.c_int
        cu.cuCtxGetCurrent.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        cu.cuGetErrorName.restype = ctypes.c_int
        cu.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        _lib = cu
    return _lib


def error_name(rc: int) -> str:
    name = ctypes.c_char_p()
    if lib().cuGetErrorName(rc, ctypes.byref(name)) == 0 and name.value:
        return name.value.decode()
    return f"CUresult {rc}"


def has_context() -> bool:
    """Whether this thread has a current CUDA context (the runtime binds one lazily)."""
    ctx = ctypes.c_void_p()
    return lib().cuCtxGetCurrent(ctypes.byref(ctx)) == 0 and bool(ctx.value)


def launch(function: int, grid: int, block: int, smem_bytes: int, stream: int, params) -> None:
    """cuLaunchKernel of a 1-D grid; ``params`` is a ctypes array of argument pointers."""
    rc = lib().cuLaunchKernel(function, grid, 1, 1, block, 1, 1, smem_bytes, stream, params, None)
    if rc != 0:
        raise RuntimeError(f"cuLaunchKernel failed: {error_name(rc)} (grid {grid}, block {block}, "
                           f"{smem_bytes} B shared memory)")
