"""TMA tensor maps: cuTensorMapEncodeTiled through ctypes (fp8gemm/driver.py).

Maps are cached per (address, shape, stride, box); a map only encodes those values, so a cached
map stays valid for any array later allocated at the same address with the same geometry.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from . import driver

# CUtensorMap enums (cuda.h)
DTYPE_UINT8 = 0
DTYPE_UINT16 = 1
DTYPE_UINT32 = 2
_DTYPE_BY_SIZE = {1: DTYPE_UINT8, 2: DTYPE_UINT16, 4: DTYPE_UINT32}
INTERLEAVE_NONE = 0
SWIZZLE_NONE = 0
SWIZZLE_64B = 2
SWIZZLE_128B = 3
L2_PROMOTION_256B = 3
OOB_FILL_ZERO = 0      # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: out-of-bounds elements read as zero

_cache = {}
_lock = threading.Lock()
DESCRIPTOR = np.dtype((np.void, 128))


ZERO_DESCRIPTOR = np.zeros(1, dtype=DESCRIPTOR)[0]   # stands in for an unused tensor-map argument


def encode_2d_fp8(ptr: int, rows: int, cols: int, row_stride: int, box_rows: int, box_cols: int = 128):
    """A 128B-swizzled map over a [rows, cols] byte matrix with ``row_stride`` bytes between rows.

    Returns the 128-byte descriptor as a numpy.void, ready to pass as a __grid_constant__ arg.
    """
    return encode_2d(ptr, rows, cols, row_stride, box_rows, box_cols, 1)


def encode_2d(ptr: int, rows: int, cols: int, row_stride: int, box_rows: int, box_cols: int, elem_bytes: int,
              swizzle: int = SWIZZLE_128B):
    """A map (128B-swizzled unless ``swizzle`` says otherwise) over a [rows, cols] matrix of
    ``elem_bytes``-byte elements (copied as raw 8/16/32-bit words: TMA converts nothing),
    ``row_stride`` in bytes."""
    key = (ptr, rows, cols, row_stride, box_rows, box_cols, elem_bytes, swizzle)
    desc = _cache.get(key)
    if desc is not None:
        return desc
    buf = np.zeros(1, dtype=DESCRIPTOR)
    dims = (ctypes.c_uint64 * 2)(cols, rows)
    strides = (ctypes.c_uint64 * 1)(row_stride)
    box = (ctypes.c_uint32 * 2)(box_cols, box_rows)
    elem = (ctypes.c_uint32 * 2)(1, 1)
    rc = driver.lib().cuTensorMapEncodeTiled(buf.ctypes.data, _DTYPE_BY_SIZE[elem_bytes], 2, ptr, dims, strides, box,
                                          elem, INTERLEAVE_NONE, swizzle, L2_PROMOTION_256B,
                                          OOB_FILL_ZERO)
    if rc != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {rc}) for a [{rows}, {cols}] "
                           f"matrix of {elem_bytes}-byte elements, row stride {row_stride} B, "
                           f"box [{box_rows}, {box_cols}]")
    desc = buf[0]
    with _lock:
        if len(_cache) > 4096:
            _cache.clear()
        _cache[key] = desc
    return desc
