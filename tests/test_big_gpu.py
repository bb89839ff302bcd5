"""GPU, big tensors: outputs with more than 2^31 elements and operands past 2^31 bytes
compute correctly (64-bit offsets everywhere), through the dispatcher and the variants forced.

The float64 reference of a whole 4 GB output would be far larger than the GEMM, so each case checks
sampled rows (always including the first and last, and every row past the 2^31-element mark) and,
for wide B, sampled columns, against a float64 reference of just those rows and columns.
Each case needs up to ~12 GB of GPU memory; the H200 has 141 GB.
"""
import numpy as np
import pytest

import fp8gemm
from fp8gemm import reference
from fp8gemm.dispatch import GemmDesc, General, SwapAB, is_valid
from fp8gemm.testing import MODERATE_BYTES, MODERATE_MEAN_SQ, as_float64

pytestmark = pytest.mark.gpu

TWO31 = 2**31


@pytest.fixture(autouse=True)
def _free_pool():
    yield
    import cupy
    cupy.get_default_memory_pool().free_all_blocks()


def big_operands(m, n, k, seed):
    """Random moderate FP8 bytes (generated as uint8 indices: no int64 temporaries of the full
    size) and scales that keep |C| near 1."""
    import cupy
    rng = cupy.random.default_rng(seed)
    table = cupy.asarray(MODERATE_BYTES)
    a = table[rng.integers(0, len(MODERATE_BYTES), size=(m, k), dtype=cupy.uint8)]
    b = table[rng.integers(0, len(MODERATE_BYTES), size=(n, k), dtype=cupy.uint8)]
    kb, nb = -(-k // 128), -(-n // 128)
    level = (k * MODERATE_MEAN_SQ ** 2) ** -0.25
    sa = (level * 2.0 ** rng.uniform(-1, 1, size=(m, kb))).astype(cupy.float32)
    sb = (level * 2.0 ** rng.uniform(-1, 1, size=(nb, kb))).astype(cupy.float32)
    return a, b, sa, sb


def reference_block(a, b, sa, sb, rows, cols):
    """float64 C[rows][:, cols] from the sampled rows of A and of B only (each sampled B row
    with its own row of block scales: a per-row scale, as dequantize_a takes)."""
    import cupy
    ad = reference.dequantize_a(a[rows], sa[rows], cupy)
    bd = reference.dequantize_a(b[cols], sb[cols // 128], cupy)
    return ad @ bd.T


def sample(total, extra, seed, always=()):
    rng = np.random.default_rng(seed)
    picks = set(int(v) for v in rng.integers(0, total, size=extra)) | {0, total - 1} | set(always)
    return np.array(sorted(picks))


def check(out, a, b, sa, sb, rows, cols, tol=4e-3):
    import cupy
    r, c = cupy.asarray(rows), cupy.asarray(cols)
    got = as_float64(out[r][:, c])
    ref = reference_block(a, b, sa, sb, r, c)
    err = reference.rel_fro_error(got, ref)
    assert bool(cupy.isfinite(got).all()) and err <= tol, f"relative error {err:.2e} on the sampled block"


@pytest.mark.parametrize("how", ["dispatcher", "direct_store", "swap_ab"])
def test_output_past_2_31_elements(how):
    """C is 65600 x 32768 (2^31 + 2.1M elements, 4.3 GB): rows past the 2^31-element mark are
    checked in full width samples, along with random ones."""
    import cupy
    m, n, k = 65600, 32768, 256
    assert m * n > TWO31
    a, b, sa, sb = big_operands(m, n, k, seed=1)
    cand, out = None, None
    if how == "direct_store":
        # A row pitch of N + 1 fp16 elements is not a multiple of 16 bytes: no TMA store, every
        # element through a 64-bit offset from registers.
        buf = cupy.empty((m, n + 1), dtype=cupy.float16)
        out = buf[:, :n]
        cand = General(128, 4, 8)
    elif how == "swap_ab":
        cand = SwapAB(64, 4, 8)
        assert is_valid(GemmDesc(m, n, k, "bfloat16"), cand)
    res = fp8gemm.matmul(a, b, sa, sb, out=out, config=cand)
    first_past = TWO31 // n                       # the first row whose offsets pass 2^31 elements
    rows = sample(m, 24, seed=2, always=range(first_past - 1, m))
    cols = sample(n, 300, seed=3, always=range(n - 130, n))
    check(res, a, b, sa, sb, rows, cols, tol=1e-3 if how == "direct_store" else 4e-3)


@pytest.mark.parametrize("how", ["dispatcher", "swap_ab_split_k"])
def test_a_past_2_31_bytes(how):
    """A is 131200 x 16384 FP8 (2.15 GB): TMA coordinates and scale offsets past 2^31 bytes."""
    m, n, k = 131200, 256, 16384
    assert m * k > TWO31
    a, b, sa, sb = big_operands(m, n, k, seed=4)
    cand = None if how == "dispatcher" else SwapAB(64, 4, 8, splits=2)
    res = fp8gemm.matmul(a, b, sa, sb, config=cand)
    rows = sample(m, 64, seed=5, always=range(m - 130, m))
    check(res, a, b, sa, sb, rows, np.arange(n))


@pytest.mark.parametrize("how", ["dispatcher", "general_split_k"])
def test_b_past_2_31_bytes(how):
    """B is 131200 x 16384 FP8 (2.15 GB, the decode case of a very wide weight), M = 40."""
    m, n, k = 40, 131200, 16384
    assert n * k > TWO31
    a, b, sa, sb = big_operands(m, n, k, seed=6)
    cand = None if how == "dispatcher" else General(128, 4, 8, splits=2)
    res = fp8gemm.matmul(a, b, sa, sb, config=cand)
    cols = sample(n, 512, seed=7, always=range(n - 130, n))
    check(res, a, b, sa, sb, np.arange(m), cols)
