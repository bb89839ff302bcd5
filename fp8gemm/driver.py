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
        cu.cuStreamIsCapturing.restype = ctypes.c_int
        cu.cuStreamIsCapturing.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        cu.cuThreadExchangeStreamCaptureMode.restype = ctypes.c_int
        cu.cuThreadExchangeStreamCaptureMode.argtypes = [ctypes.POINTER(ctypes.c_int)]
        cu.cuMemsetD32Async.restype = ctypes.c_int
        cu.cuMemsetD32Async.argtypes = [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p]
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


CAPTURE_MODE_RELAXED = 2      # CU_STREAM_CAPTURE_MODE_RELAXED
CAPTURE_STATUS_ACTIVE = 1     # CU_STREAM_CAPTURE_STATUS_ACTIVE


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what} failed: {error_name(rc)}")


_rt_capturing = None      # CuPy's Cython cudaStreamIsCapturing (None: not looked up, False: absent)


def stream_capturing(stream: int) -> bool:
    """Whether work on ``stream`` is being captured into a CUDA graph right now (through CuPy's
    Cython wrapper when there is one: a third of the ctypes call's host time)."""
    global _rt_capturing
    if _rt_capturing is None:
        try:
            from cupy_backends.cuda.api.runtime import streamIsCapturing as _rt_capturing
        except ImportError:
            _rt_capturing = False
    if _rt_capturing:
        return bool(_rt_capturing(stream))
    status = ctypes.c_int(0)
    _check(lib().cuStreamIsCapturing(stream, ctypes.byref(status)), "cuStreamIsCapturing")
    return status.value == CAPTURE_STATUS_ACTIVE


class relaxed_capture:
    """Within this block the calling thread may allocate and load modules even while a stream is
    captured in global mode (torch.cuda.graph's default): the relaxed mode lets this thread make
    the calls that global mode refuses during any capture. Restores the previous mode on exit."""

    __slots__ = ("previous",)

    def __enter__(self):
        mode = ctypes.c_int(CAPTURE_MODE_RELAXED)
        _check(lib().cuThreadExchangeStreamCaptureMode(ctypes.byref(mode)), "cuThreadExchangeStreamCaptureMode")
        self.previous = mode.value
        return self

    def __exit__(self, *exc):
        mode = ctypes.c_int(self.previous)
        _check(lib().cuThreadExchangeStreamCaptureMode(ctypes.byref(mode)), "cuThreadExchangeStreamCaptureMode")
        return False


def memset_u32_async(ptr: int, value: int, count: int, stream: int) -> None:
    """cuMemsetD32Async: ``count`` 32-bit words at ``ptr`` set to ``value``, ordered on ``stream``
    (recorded as a memset node when the stream is being captured)."""
    _check(lib().cuMemsetD32Async(ptr, value, count, stream), "cuMemsetD32Async")


CUDA_ERROR_INVALID_CONTEXT = 201
_raw_launch = None
_cy_launch = None      # CuPy's Cython cuLaunchKernel wrapper (None: not looked up yet, False: absent)


def _cupy_launch():
    global _cy_launch
    try:
        from cupy_backends.cuda.api.driver import CUDADriverError, launchKernel

        _cy_launch = (launchKernel, CUDADriverError)
    except ImportError:
        _cy_launch = False
    return _cy_launch


def launch_args(function: int, grid: int, block: int, smem_bytes: int) -> tuple:
    """The leading cuLaunchKernel arguments of one kernel (function, grid x/y/z, block x/y/z,
    shared memory bytes), built once per plan (see launch_prebuilt)."""
    return (function, grid, 1, 1, block, 1, 1, smem_bytes)


def launch_prebuilt(prefix: tuple, stream: int, params: int) -> int:
    """cuLaunchKernel with a prebuilt argument block (``prefix`` from launch_args, ``params`` the
    address of the array of argument pointers); returns the CUresult.

    NOTES: through CuPy's Cython wrapper when CuPy is there: on the H200 machine ctypes took 7.3 us
    per launch where the driver alone takes 3.5 us in C (lab/launch_floor.c; host overhead,
    bench/NOTES.md). A launch the wrapper reports as failed is repeated through ctypes, which returns the
    error code to the caller's handling (a missing context is bound and the launch retried)."""
    cy = _cy_launch if _cy_launch is not None else _cupy_launch()
    if cy:
        try:
            cy[0](*prefix, stream, params, 0)
            return 0
        except cy[1]:
            pass
    global _raw_launch
    fn = _raw_launch
    if fn is None:
        fn = lib()["cuLaunchKernel"]          # a second function object, without argtypes
        fn.restype = ctypes.c_int
        _raw_launch = fn
    c_uint = ctypes.c_uint
    return fn(ctypes.c_void_p(prefix[0]), *(c_uint(v) for v in prefix[1:]), ctypes.c_void_p(stream),
              ctypes.c_void_p(params), None)


CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4


class _LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute (cuda.h): the id, padding to 8 bytes, a 64-byte value union whose
    clusterDim member is three unsigned ints."""
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint32 * 16)]


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig (cuda.h)."""
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


_launch_ex = None


def launch_cluster_prebuilt(prefix: tuple, cluster: int, stream: int, params: int) -> int:
    """cuLaunchKernelEx of a prebuilt launch (``prefix`` from launch_args) in clusters of
    ``cluster`` CTAs along x (the runtime cluster attribute: the kernel carries no
    __cluster_dims__); returns the CUresult. Through ctypes only (CuPy wraps no cuLaunchKernelEx):
    a few microseconds more host time than launch_prebuilt, for the forced cluster forms alone."""
    global _launch_ex
    fn = _launch_ex
    if fn is None:
        fn = lib()["cuLaunchKernelEx"]
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.POINTER(_LaunchConfig), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        _launch_ex = fn
    attr = _LaunchAttribute()
    attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value[0], attr.value[1], attr.value[2] = cluster, 1, 1
    config = _LaunchConfig(*prefix[1:8], stream, ctypes.pointer(attr), 1)
    return fn(ctypes.byref(config), prefix[0], params, None)


def check_launch(rc: int, grid: int, block: int, smem_bytes: int, api: str = "cuLaunchKernel") -> None:
    """``api``: the call that returned ``rc`` (cuLaunchKernelEx for a cluster launch), so that a
    refused cluster is not read as a plain launch's failure."""
    if rc != 0:
        raise RuntimeError(f"{api} failed: {error_name(rc)} (grid {grid}, block {block}, "
                           f"{smem_bytes} B shared memory)")
