"""DLPack over ctypes: read any producer's capsule (FP8 included) and produce capsules of our own.

CuPy refuses DLPack FP8 (type code 10), so intake reads the C structs itself. Both capsule kinds
are handled: "dltensor" (DLManagedTensor) and "dltensor_versioned" (DLManagedTensorVersioned,
DLPack >= 1.0). We never rename (consume) a capsule: its destructor frees the producer's tensor,
and the producer's array stays referenced by the caller for as long as the launch needs it.

``export(ptr, shape, dtype, device_id, owner)`` builds an unversioned capsule that keeps ``owner``
alive until the consumer calls the deleter; fp8gemm uses it to hand results to JAX zero-copy.
"""
from __future__ import annotations

import ctypes
import itertools
import threading
from dataclasses import dataclass

# ---- the C structs (dlpack.h, v1.1) -----------------------------------------------------------

DL_CPU = 1
DL_CUDA = 2
DL_CUDA_HOST = 3
DL_CUDA_MANAGED = 13

DL_FLAG_READ_ONLY = 1


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", DELETER),
]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


# (type code, bits) -> our dtype name. Lanes must be 1.
DTYPE_NAMES = {
    (0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
    (1, 8): "uint8", (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64",
    (2, 16): "float16", (2, 32): "float32", (2, 64): "float64",
    (4, 16): "bfloat16", (6, 8): "bool",
    (7, 8): "float8_e3m4", (8, 8): "float8_e4m3", (9, 8): "float8_e4m3b11fnuz",
    (10, 8): "float8_e4m3fn", (11, 8): "float8_e4m3fnuz", (12, 8): "float8_e5m2",
    (13, 8): "float8_e5m2fnuz", (14, 8): "float8_e8m0fnu",
}
DTYPE_CODES = {name: key for key, name in DTYPE_NAMES.items()}

# ---- Python C-API entry points ------------------------------------------------------------------

# NOTES: private prototypes, not the attributes of ctypes.pythonapi: those function objects are
# shared by the whole process, and other libraries set their argtypes too (jax.ffi.pycapsule sets
# PyCapsule_New's destructor argument to a CFUNCTYPE, which then refused our c_void_p).
_api = ctypes.pythonapi
_capsule_get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", _api))
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", _api))
# The destructor gets a dying object: it must not touch refcounts, so these take raw pointers.
_capsule_is_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_capsule_get_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))

LEGACY_NAME = b"dltensor"
VERSIONED_NAME = b"dltensor_versioned"


@dataclass(frozen=True)
class DLView:
    """What a capsule describes, in plain Python values. Strides are in elements."""

    ptr: int
    device_type: int
    device_id: int
    dtype: str
    shape: tuple
    strides: tuple
    read_only: bool


def _dtype_name(dt: DLDataType) -> str:
    if dt.lanes != 1:
        return f"dlpack(code={dt.code}, bits={dt.bits}, lanes={dt.lanes})"
    return DTYPE_NAMES.get((dt.code, dt.bits), f"dlpack(code={dt.code}, bits={dt.bits})")


def read_capsule(capsule) -> DLView:
    """Parse a "dltensor" or "dltensor_versioned" capsule without consuming it."""
    try:
        name = _capsule_get_name(capsule)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"expected a DLPack capsule, got {type(capsule).__name__}") from exc
    read_only = False
    if name == VERSIONED_NAME:
        managed = DLManagedTensorVersioned.from_address(_capsule_get_pointer(capsule, name))
        if managed.version.major != 1:
            raise TypeError(f"unsupported DLPack major version {managed.version.major} (need 1)")
        read_only = bool(managed.flags & DL_FLAG_READ_ONLY)
        t = managed.dl_tensor
    elif name == LEGACY_NAME:
        t = DLManagedTensor.from_address(_capsule_get_pointer(capsule, name)).dl_tensor
    else:
        raise TypeError(f"not a live DLPack capsule (name {name!r}); was it consumed already?")
    ndim = t.ndim
    shape = tuple(t.shape[i] for i in range(ndim))
    if t.strides:
        strides = tuple(t.strides[i] for i in range(ndim))
    else:  # NULL strides: compact row-major
        strides, acc = [], 1
        for dim in reversed(shape):
            strides.append(acc)
            acc *= dim
        strides = tuple(reversed(strides))
    return DLView(ptr=(t.data or 0) + t.byte_offset, device_type=t.device.device_type,
                  device_id=t.device.device_id, dtype=_dtype_name(t.dtype), shape=shape,
                  strides=strides, read_only=read_only)


# ---- producing capsules -------------------------------------------------------------------------

_live = {}                      # manager_ctx key -> (struct, shape, strides, owner)
_live_lock = threading.Lock()
_keys = itertools.count(1)


@DELETER
def _deleter(managed_ptr):
    key = DLManagedTensor.from_address(managed_ptr).manager_ctx
    with _live_lock:
        _live.pop(key, None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule_ptr):
    # Unconsumed capsules (still named "dltensor") free their tensor; consumed ones were renamed.
    if _capsule_is_valid_raw(capsule_ptr, LEGACY_NAME):
        managed_ptr = _capsule_get_pointer_raw(capsule_ptr, LEGACY_NAME)
        _deleter(managed_ptr)


def export(ptr: int, shape, dtype: str, device_type: int, device_id: int, owner, strides=None):
    """An unversioned DLPack capsule over memory that ``owner`` keeps alive.

    ``strides`` in elements, compact row-major when None.
    """
    code, bits = DTYPE_CODES[dtype]
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_arr = None
    if strides is not None:
        strides_arr = (ctypes.c_int64 * max(ndim, 1))(*strides)
    key = next(_keys)
    managed = DLManagedTensor()
    managed.dl_tensor.data = ptr
    managed.dl_tensor.device = DLDevice(device_type, device_id)
    managed.dl_tensor.ndim = ndim
    managed.dl_tensor.dtype = DLDataType(code, bits, 1)
    managed.dl_tensor.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    managed.dl_tensor.strides = (ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
                                 if strides_arr is not None else None)
    managed.dl_tensor.byte_offset = 0
    managed.manager_ctx = key
    managed.deleter = _deleter
    with _live_lock:
        _live[key] = (managed, shape_arr, strides_arr, owner)
    return _capsule_new(ctypes.addressof(managed), LEGACY_NAME,
                        ctypes.cast(_capsule_destructor, ctypes.c_void_p))


def live_exports() -> int:
    """How many exported tensors are still held by a capsule or a consumer (for tests)."""
    with _live_lock:
        return len(_live)
