"""Host reference and quantizers: numpy + ml_dtypes, float64 arithmetic.

Everything here is the definition the kernels are tested against:

* ``dequantize_a(a, a_scale)``: A [M, K] FP8 times its per-token-group scales [M, ceil(K/128)].
* ``dequantize_b(b, b_scale)``: B [N, K] FP8 times its 128x128 block scales [ceil(N/128), ceil(K/128)].
* ``matmul(a, b, a_scale, b_scale)``: float64 ``dequantize_a @ dequantize_b.T``, optionally cast.
* ``quantize_per_token_group(x)`` / ``quantize_per_block(w)``: scale = amax / 448, values rounded
  to nearest-even FP8 E4M3.

FP8 inputs may be ml_dtypes ``float8_e4m3fn`` arrays or their uint8/int8 bytes. The functions take
an ``xp`` module (numpy by default; cupy works the same way) so large test cases can run the same
float64 math on the GPU.
"""
from __future__ import annotations

import numpy as np

from .dtypes import BFLOAT16, FLOAT_TYPES, FP8_E4M3
from .hw import FP8_E4M3_MAX, SCALE_BLOCK

# Decoding table: byte -> float64 value of that float8_e4m3fn bit pattern (NaN for 0x7f / 0xff).
FP8_E4M3_DECODE = np.arange(256, dtype=np.uint8).view(FP8_E4M3).astype(np.float64)

_OUT_DTYPES = {**{name: t.numpy for name, t in FLOAT_TYPES.items()}, "float64": np.dtype(np.float64)}


def _as_bytes(x, xp):
    """FP8 array (ml_dtypes) or uint8/int8 bytes -> uint8 array of the same shape."""
    x = xp.asarray(x) if xp is not np else np.asarray(x)
    if x.dtype == FP8_E4M3 or x.dtype == np.int8:
        return x.view(np.uint8)
    if x.dtype == np.uint8:
        return x
    raise TypeError(f"expected FP8 E4M3 (float8_e4m3fn) or uint8/int8 bytes, got {x.dtype}")


def fp8_to_float64(x, xp=np):
    """Decode FP8 E4M3 values (or their bytes) to float64."""
    table = FP8_E4M3_DECODE if xp is np else xp.asarray(FP8_E4M3_DECODE)
    return table[_as_bytes(x, xp)]


def _expand_scales(scale, rows: int, cols: int, block_rows: int, xp):
    """Repeat a [ceil(rows/br), ceil(cols/128)] scale grid to [rows, cols]."""
    s = xp.asarray(scale, dtype=xp.float64)
    s = xp.repeat(xp.repeat(s, block_rows, axis=0), SCALE_BLOCK, axis=1)
    return s[:rows, :cols]


def dequantize_a(a, a_scale, xp=np):
    """A [M, K] FP8 with per-token-group scales [M, ceil(K/128)] -> float64 [M, K]."""
    av = fp8_to_float64(a, xp)
    m, k = av.shape
    return av * _expand_scales(a_scale, m, k, 1, xp)


def dequantize_b(b, b_scale, xp=np):
    """B [N, K] FP8 with 128x128 block scales [ceil(N/128), ceil(K/128)] -> float64 [N, K]."""
    bv = fp8_to_float64(b, xp)
    n, k = bv.shape
    return bv * _expand_scales(b_scale, n, k, SCALE_BLOCK, xp)


def matmul(a, b, a_scale, b_scale, out_dtype=None, xp=np):
    """C = (A * As) @ (B * Bs)^T in float64; cast to ``out_dtype`` (name or dtype) if given."""
    c = dequantize_a(a, a_scale, xp) @ dequantize_b(b, b_scale, xp).T
    if out_dtype is None:
        return c
    return c.astype(_OUT_DTYPES[np.dtype(out_dtype).name] if not isinstance(out_dtype, str)
                    else _OUT_DTYPES[out_dtype])


def _round_to_fp8(x):
    """float array -> ml_dtypes float8_e4m3fn, nearest-even, clipped to the finite range."""
    return np.clip(x, -FP8_E4M3_MAX, FP8_E4M3_MAX).astype(FP8_E4M3)


def quantize_per_token_group(x, group_size: int = SCALE_BLOCK, eps: float = 1e-10):
    """Quantize activations x [..., K] per 1 x group_size group.

    Returns (q, scale): q [..., K] float8_e4m3fn, scale [..., ceil(K/group_size)] float32 with
    scale = max(amax, eps) / 448 and q = round(x / scale). K need not be a multiple of group_size.
    """
    x = np.asarray(x, dtype=np.float32)
    k = x.shape[-1]
    groups = -(-k // group_size)
    padded = np.zeros(x.shape[:-1] + (groups * group_size,), dtype=np.float32)
    padded[..., :k] = x
    g = padded.reshape(x.shape[:-1] + (groups, group_size))
    scale = (np.maximum(np.abs(g).max(axis=-1), eps) / FP8_E4M3_MAX).astype(np.float32)
    q = _round_to_fp8(g / scale[..., None]).reshape(padded.shape)[..., :k]
    return np.ascontiguousarray(q), scale


def quantize_per_block(w, block=(SCALE_BLOCK, SCALE_BLOCK), eps: float = 1e-10):
    """Quantize weights w [N, K] per block[0] x block[1] tile.

    Returns (q, scale): q [N, K] float8_e4m3fn, scale [ceil(N/b0), ceil(K/b1)] float32.
    """
    w = np.asarray(w, dtype=np.float32)
    n, k = w.shape
    b0, b1 = block
    nb, kb = -(-n // b0), -(-k // b1)
    padded = np.zeros((nb * b0, kb * b1), dtype=np.float32)
    padded[:n, :k] = w
    tiles = padded.reshape(nb, b0, kb, b1)
    scale = (np.maximum(np.abs(tiles).max(axis=(1, 3)), eps) / FP8_E4M3_MAX).astype(np.float32)
    q = _round_to_fp8(tiles / scale[:, None, :, None]).reshape(padded.shape)[:n, :k]
    return np.ascontiguousarray(q), scale


def matmul_naive(a, b, a_scale, b_scale):
    """Triple loop over (m, n, k) with per-element scales: the independent check of ``matmul``.

    Compiled with numba's CPU @njit when it is importable; plain Python otherwise (small sizes).
    """
    av = fp8_to_float64(a)
    bv = fp8_to_float64(b)
    sa = np.asarray(a_scale, dtype=np.float64)
    sb = np.asarray(b_scale, dtype=np.float64)
    return _naive_kernel()(av, bv, sa, sb)


def _naive_loop(av, bv, sa, sb):
    m, k = av.shape
    n = bv.shape[0]
    c = np.zeros((m, n))
    for i in range(m):
        for j in range(n):
            acc = 0.0
            for kk in range(k):
                g = kk // 128
                acc += av[i, kk] * sa[i, g] * bv[j, kk] * sb[j // 128, g]
            c[i, j] = acc
    return c


_NAIVE = None


def _naive_kernel():
    global _NAIVE
    if _NAIVE is None:
        try:
            import numba
            _NAIVE = numba.njit(cache=False)(_naive_loop)
        except ImportError:  # pragma: no cover - numba is a declared dependency
            _NAIVE = _naive_loop
    return _NAIVE


def _xp_of(x):
    """numpy for host arrays, cupy for cupy arrays (imported only then)."""
    if type(x).__module__.startswith("cupy"):
        import cupy
        return cupy
    return np


def rel_fro_error(out, ref) -> float:
    """||out - ref||_F / ||ref||_F in float64 (NaN anywhere gives NaN)."""
    xp = _xp_of(ref)
    o = xp.asarray(out).astype(xp.float64)
    r = xp.asarray(ref).astype(xp.float64)
    return float(xp.linalg.norm(o - r) / xp.linalg.norm(r))


def calc_diff(out, ref) -> float:
    """1 - 2 sum(x y) / sum(x^2 + y^2): 0 for identical, ~1 for unrelated (DeepGEMM's metric)."""
    xp = _xp_of(ref)
    x = xp.asarray(out).astype(xp.float64)
    y = xp.asarray(ref).astype(xp.float64)
    denom = float((x * x + y * y).sum())
    return float(1.0 - 2.0 * float((x * y).sum()) / denom)
