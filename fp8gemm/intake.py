"""Intake: any caller array -> ``Tensor`` (pointer, dtype name, shape, strides, device, framework).

Stage 1 of matmul. CuPy and PyTorch arrays are read through their own attributes (cheapest);
every other object with ``__dlpack__`` (JAX, or anything else) through its DLPack capsule, which is
how FP8 arrives from JAX. CuPy has no FP8 dtype: FP8 operands come as uint8/int8 bytes there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import dlpack

CUPY, TORCH, JAX, DLPACK = "cupy", "torch", "jax", "dlpack"


@dataclass(frozen=True)
class Tensor:
    """A strided view of device memory. Strides are in elements; ``device`` is None on the host."""

    name: str            # the argument's name, for error messages
    ptr: int
    dtype: str
    shape: tuple
    strides: tuple
    device: int | None
    framework: str
    read_only: bool
    obj: Any             # the caller's object (kept alive for the launch)
    keepalive: Any = None  # the DLPack capsule, when we parsed one

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE.get(self.dtype, 0)


_ITEMSIZE = {"int8": 1, "uint8": 1, "bool": 1, "float16": 2, "bfloat16": 2, "int16": 2, "uint16": 2,
             "float32": 4, "int32": 4, "uint32": 4, "float64": 8, "int64": 8, "uint64": 8}
for _n in dlpack.DTYPE_NAMES.values():
    if _n.startswith("float8"):
        _ITEMSIZE[_n] = 1


def framework_of(x) -> str:
    mod = type(x).__module__
    if mod.startswith("cupy"):
        return CUPY
    if mod.startswith("torch"):
        return TORCH
    if mod.startswith(("jax", "jaxlib")):
        return JAX
    return DLPACK


_NUMPY_NAMES = {}


def _numpy_dtype_name(dt) -> str:
    """numpy dtype -> name; cached (numpy computes ``dtype.name`` in Python, ~10 us)."""
    name = _NUMPY_NAMES.get(dt)
    if name is None:
        name = _NUMPY_NAMES[dt] = dt.name
    return name


def _from_cupy(x, name: str) -> Tensor:
    dt = x.dtype
    itemsize = dt.itemsize
    return Tensor(name, x.data.ptr, _numpy_dtype_name(dt), x.shape,
                  tuple(s // itemsize for s in x.strides), x.device.id, CUPY, False, x)



def _torch_dtype_name(dt) -> str:
    return str(dt).replace("torch.", "")


def _from_torch(x, name: str) -> Tensor:
    dev = x.device
    if dev.type == "meta":
        raise ValueError(f"{name} is a meta tensor (a shape without data): fp8gemm's eager functions need CUDA "
                         f"tensors; for tracing, call the torch.ops.fp8gemm operators (import fp8gemm.torch_ops), "
                         f"whose fake kernels take meta and fake tensors")
    device = dev.index if dev.type == "cuda" else None
    if dev.type == "cuda" and device is None:
        import torch
        device = torch.cuda.current_device()
    return Tensor(name, x.data_ptr(), _torch_dtype_name(x.dtype), tuple(x.shape), tuple(x.stride()),
                  device, TORCH, False, x)


def _from_dlpack(x, name: str, framework: str, stream_for) -> Tensor:
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"{name} must be a CuPy, PyTorch or JAX array (or support __dlpack__); "
                        f"got {type(x).__module__}.{type(x).__name__}")
    device_type, device_id = x.__dlpack_device__()
    if device_type not in (dlpack.DL_CUDA, dlpack.DL_CUDA_MANAGED):
        raise ValueError(f"{name} is on the host (DLPack device type {device_type}); "
                         f"fp8gemm needs CUDA arrays")
    # NOTES: passing our stream makes the producer order its pending writes before our launch.
    # DLPack spells the legacy default stream 1 (0 is ambiguous and not allowed).
    stream_ptr = None if stream_for is None else stream_for(device_id)
    stream = None if stream_ptr is None else (1 if stream_ptr == 0 else stream_ptr)
    try:
        capsule = x.__dlpack__(stream=stream, max_version=(1, 1))
    except TypeError:
        capsule = x.__dlpack__(stream=stream)
    view = dlpack.read_capsule(capsule)
    return Tensor(name, view.ptr, view.dtype, view.shape, view.strides, view.device_id, framework,
                  view.read_only, x, capsule)


def intake(x, name: str, stream_for=None) -> Tensor:
    """Describe the caller's array ``x`` (argument ``name``) without copying it.

    ``stream_for(device_id) -> stream pointer`` names the stream the launch will use; DLPack
    producers are asked to order their pending work before it.
    """
    fw = framework_of(x)
    if fw == CUPY:
        return _from_cupy(x, name)
    if fw == TORCH and hasattr(x, "data_ptr"):
        return _from_torch(x, name)
    if type(x).__module__ == "numpy" or hasattr(x, "__array_interface__"):
        raise ValueError(f"{name} is a host (NumPy) array; fp8gemm needs CUDA arrays "
                         f"(CuPy, PyTorch or JAX on a GPU)")
    return _from_dlpack(x, name, fw, stream_for)
