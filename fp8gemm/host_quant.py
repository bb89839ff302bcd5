"""The host quantizers, compiled by numba: bit for bit the NumPy definitions in reference.py.

``quantize_per_block(w)`` (weights, 128 x 128 blocks) and ``quantize_per_token_group(x)``
(activations, 1 x 128 groups) take one pass per block for its amax and one for its values, over
rows of blocks in parallel threads, instead of NumPy's padded copies and temporaries (7168 x 18432
float32 weights: 0.3-0.6 s on two CPU cores against 2-7 s). Every step keeps NumPy's float32
arithmetic: amax (a NaN anywhere makes the block's scale NaN, as ``max`` propagates it),
``max(amax, eps) / 448`` and ``x / scale`` in float32, clipping to +-448, and the float32 -> E4M3
rounding (nearest-even, on the bits, without branches so that the row loops vectorize). The
rounding was checked against ml_dtypes on every float32 bit pattern, alone and inside the
vectorized block loop (bench/NOTES.md); tests/test_host_quant.py keeps a sample of them. Without
numba the NumPy definitions run.
"""
from __future__ import annotations

import math

import numpy as np

from . import reference
from .dtypes import FP8_E4M3
from .hw import SCALE_BLOCK

MIN_EPS = 2.0**-100            # eps / 448 stays a normal float32 (the GPU kernels run flush-to-zero)
_FLOAT_KINDS = ("float16", "bfloat16", "float32", "float64")

_KERNEL = None


def check_eps(eps) -> None:
    """The quantizers' eps rule, host and GPU alike (they compute the same values)."""
    if isinstance(eps, bool) or not (isinstance(eps, (int, float, np.floating)) and math.isfinite(eps)
                                     and eps >= MIN_EPS):
        raise ValueError(f"eps must be a finite number >= 2**-100 (got {eps!r}): scales eps / 448 must stay "
                         f"normal float32 values, because the GPU kernels are compiled flush-to-zero and the "
                         f"host quantizers compute the same values")


def _check_block(value, name: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__") or value < 1:
        raise ValueError(f"{name} must be a positive integer (got {value!r})")
    return int(value)


def host_input(x, name: str, min_ndim: int, shape_rule: str):
    """x as a float32 NumPy array, or a TypeError / ValueError naming ``name`` and the rule:
    real floating-point values (float16, bfloat16, float32, float64) of at least ``min_ndim``
    dimensions."""
    a = np.asarray(x)
    if a.dtype.name not in _FLOAT_KINDS:
        raise TypeError(f"{name} must hold floating-point values (float16, bfloat16, float32 or float64); "
                        f"got dtype {a.dtype}")
    if a.ndim < min_ndim:
        raise ValueError(f"{name} must be {shape_rule}; got shape {a.shape}")
    return a.astype(np.float32, copy=False)


def _kernel():
    global _KERNEL
    if _KERNEL is None:
        try:
            from ._host_quant_kernels import quantize_blocks
            _KERNEL = quantize_blocks
        except ImportError:
            _KERNEL = False
    return _KERNEL


def _quantize_2d(w, b0: int, b1: int, eps: float):
    n, k = w.shape
    q = np.empty((n, k), np.uint8)
    s = np.empty((-(-n // b0), -(-k // b1)), np.float32)
    _kernel()(np.ascontiguousarray(w, dtype=np.float32), b0, b1, np.float32(eps), q, s)
    return q.view(FP8_E4M3), s


def quantize_per_block(w, block=(SCALE_BLOCK, SCALE_BLOCK), eps: float = 1e-10):
    """Weights w [..., N, K] per block[0] x block[1] tile of each matrix -> (q [..., N, K]
    float8_e4m3fn, scale [..., ceil(N/b0), ceil(K/b1)] float32); bit for bit
    reference.quantize_per_block on each matrix."""
    w = host_input(w, "w", 2, "[..., N, K] (at least 2 dimensions)")
    block = (_check_block(block[0], "block[0]"), _check_block(block[1], "block[1]"))
    check_eps(eps)
    if w.ndim > 2:
        n, k = w.shape[-2:]
        nb, kb = -(-n // int(block[0])), -(-k // int(block[1]))
        flat = w.reshape((-1, n, k))
        q = np.empty(flat.shape, dtype=reference.FP8_E4M3)
        s = np.empty((flat.shape[0], nb, kb), dtype=np.float32)
        for i, m in enumerate(flat):
            q[i], s[i] = quantize_per_block(m, block, eps)
        return q.reshape(w.shape), s.reshape(w.shape[:-2] + (nb, kb))
    if w.ndim != 2 or w.size == 0 or not _kernel():
        return reference.quantize_per_block(w, block, eps)
    return _quantize_2d(w, int(block[0]), int(block[1]), eps)


def quantize_per_token_group(x, group_size: int = SCALE_BLOCK, eps: float = 1e-10):
    """Activations x [..., K] per 1 x group_size group -> (q [..., K] float8_e4m3fn, scale
    [..., ceil(K/group_size)] float32); bit for bit reference.quantize_per_token_group."""
    x = host_input(x, "x", 1, "[..., K] (at least 1 dimension)")
    group_size = _check_block(group_size, "group_size")
    check_eps(eps)
    if x.ndim < 1 or x.size == 0 or not _kernel():
        return reference.quantize_per_token_group(x, group_size, eps)
    k = x.shape[-1]
    q, s = _quantize_2d(x.reshape(-1, k), 1, int(group_size), eps)
    return q.reshape(x.shape), s.reshape(x.shape[:-1] + (s.shape[-1],))
