"""Output: allocate the result in the caller's framework, or hand our memory back zero-copy.

Stage 5 of matmul. torch in -> torch out (allocated by torch's caching allocator); CuPy in -> CuPy
out; JAX in -> JAX out through a DLPack capsule of our own over a CuPy allocation (JAX arrays are
immutable, so JAX cannot lend us a buffer to write), ordered after our launch on JAX's stream.
"""
from __future__ import annotations

from . import dlpack
from .dtypes import NP_DTYPES
from .intake import JAX, TORCH


def _torch_stream(device: int) -> int:
    import torch

    return torch.cuda.current_stream(device).cuda_stream


_cupy = None          # the cupy module, imported on first use (CPU-only callers never need it)


def _cupy_module():
    global _cupy
    if _cupy is None:
        from .hw import import_cupy
        _cupy = import_cupy()
    return _cupy


def cupy_cuda():
    """The cupy.cuda module (the fast path's getDevice and current stream)."""
    return (_cupy or _cupy_module()).cuda


def cupy_stream(device: int) -> int:
    """CuPy's current stream pointer on ``device``."""
    return (_cupy or _cupy_module()).cuda.get_current_stream(device).ptr


def stream_for_framework(framework: str):
    """device_id -> the caller's current stream pointer on that device (torch's for torch
    callers, CuPy's for everyone else)."""
    return _torch_stream if framework == TORCH else cupy_stream


def allocate_cupy(shape: tuple, dtype: str, device: int):
    """(CuPy array, its pointer) of ``shape`` and ``dtype`` on ``device``."""
    cupy = _cupy or _cupy_module()
    if cupy.cuda.runtime.getDevice() == device:
        arr = cupy.ndarray(shape, NP_DTYPES[dtype])       # what cupy.empty calls, one frame less
    else:
        with cupy.cuda.Device(device):
            arr = cupy.ndarray(shape, NP_DTYPES[dtype])
    return arr, arr.data.ptr


def allocate(framework: str, shape: tuple, dtype: str, device: int):
    """(array to return, pointer to write) in the caller's framework."""
    if framework == TORCH:
        import torch

        t = torch.empty(shape, dtype=getattr(torch, dtype), device=f"cuda:{device}")
        return t, t.data_ptr()
    return allocate_cupy(shape, dtype, device)


class _Exported:
    """A DLPack producer over a CuPy allocation, readable once its launch stream is done."""

    def __init__(self, arr, shape, dtype: str, device: int, stream_ptr: int):
        self._arr, self._shape, self._dtype = arr, shape, dtype
        self._device, self._stream_ptr = device, stream_ptr

    def __dlpack_device__(self):
        return (dlpack.DL_CUDA, self._device)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        import cupy

        with cupy.cuda.Device(self._device):
            event = cupy.cuda.Event(disable_timing=True)
            event.record(cupy.cuda.ExternalStream(self._stream_ptr))
            if stream is None or stream == -1:
                event.synchronize()          # the consumer named no stream: finish first
            else:
                consumer = 0 if stream == 1 else stream
                if consumer != self._stream_ptr:
                    cupy.cuda.runtime.streamWaitEvent(consumer, event.ptr)
        return dlpack.export(self._arr.data.ptr, self._shape, self._dtype, dlpack.DL_CUDA,
                             self._device, self._arr)


def finish(framework: str, arr, shape: tuple, dtype: str, device: int, stream_ptr: int):
    """The array handed back to the caller."""
    if framework == JAX:
        import jax

        return jax.dlpack.from_dlpack(_Exported(arr, shape, dtype, device, stream_ptr))
    return arr
