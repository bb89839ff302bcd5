"""numba kernels of fp8gemm/host_quant.py (imported only when numba is; compiled on first use and
cached on disk by numba)."""
import numba
import numpy as np

from .hw import FP8_E4M3_MAX

F448 = np.float32(FP8_E4M3_MAX)
F512 = np.float32(512.0)
U = np.uint32


@numba.njit(cache=True, inline="always")
def e4m3_bits(bits, f):
    """float32 ``f`` (and its bits), |f| <= 448 or NaN -> its float8_e4m3fn byte, nearest-even.
    Written without branches (selects), so that the loops over a row vectorize."""
    sign = (bits >> U(24)) & U(0x80)
    mag = bits & U(0x7FFFFFFF)
    # a normal E4M3 value (from 2^-6): the exponent and the top 3 mantissa bits, the exponent
    # rebased from 127 to 7, rounded to nearest-even (a carry moves into the exponent)
    r = (mag >> U(20)) - U((127 - 7) << 3)
    low = mag & U(0xFFFFF)
    r += U((low > U(0x80000)) | ((low == U(0x80000)) & ((r & U(1)) == U(1))))
    sub = U(np.rint(abs(f) * F512))                             # subnormal: a multiple of 2^-9
    v = r if mag >= U(0x3C800000) else sub
    return sign | (U(0x7F) if mag > U(0x7F800000) else v)     # NaN keeps its sign


@numba.njit(cache=True, parallel=True)
def quantize_blocks(w, b0, b1, eps, q, s):
    """w [n, k] float32 -> q [n, k] E4M3 bytes and s [ceil(n/b0), ceil(k/b1)] float32 scales."""
    n, k = w.shape
    nb, kb = s.shape
    for bi in numba.prange(nb):
        tmp = np.empty(b1, np.float32)
        tmp_bits = tmp.view(np.uint32)
        r0, r1 = bi * b0, min(n, (bi + 1) * b0)
        for bj in range(kb):
            c0, c1 = bj * b1, min(k, (bj + 1) * b1)
            amax = np.float32(0.0)
            nan = False
            for i in range(r0, r1):
                for j in range(c0, c1):
                    v = abs(w[i, j])
                    nan |= v != v
                    amax = max(amax, v)
            scale = np.float32(np.nan) if nan else max(amax, eps) / F448
            s[bi, bj] = scale
            for i in range(r0, r1):
                for j in range(c0, c1):
                    x = w[i, j] / scale
                    tmp[j - c0] = min(max(x, -F448), F448) if x == x else x
                for j in range(c0, c1):
                    q[i, j] = e4m3_bits(tmp_bits[j - c0], tmp[j - c0])
