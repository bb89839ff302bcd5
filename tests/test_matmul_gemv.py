"""GPU tests of the decode kernel (sm90_fp8_gemm_gemv, M <= 16) forced on every configuration the
tuner tries, on M, N and K tails and every output dtype: against the float64 reference, bit-exact
on dyadic inputs, inside NaN-poisoned buffers, bitwise reproducible, and refused past M = 16."""
import pytest

from generators import random_case
from test_matmul_general import check, check_bit_exact, check_poisoned

import fp8gemm
from fp8gemm.dispatch import Gemv

pytestmark = pytest.mark.gpu

# (warps, K blocks per warp in flight): the tuner's four (bench/tune.py).
CONFIGS = [(8, 2), (8, 1), (4, 2), (4, 4)]
# M: 1, a partial and a full token tile of 8, a second tile; N: one row, a partial 16-row CTA,
# across a 128-row scale block; K: one 16-byte chunk, a partial 64-byte chunk, a partial K block,
# several K blocks with a partial last one, more blocks than warps x unroll.
SHAPES = [(1, 1, 16), (3, 17, 48), (8, 100, 112), (9, 136, 1040), (16, 520, 4112), (5, 4096, 7168)]


def forced(m, warps=8, unroll=2):
    return Gemv(8 if m <= 8 else 16, warps, unroll)


@pytest.mark.parametrize("warps,unroll", CONFIGS, ids=str)
@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
def test_forced_configs_bf16(m, n, k, warps, unroll):
    case = random_case(m, n, k, seed=m + n + k + warps + unroll)
    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=forced(m, warps, unroll))
    check(out, case)


@pytest.mark.parametrize("out_dtype", ["float16", "float32"])
@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
def test_forced_out_dtypes(m, n, k, out_dtype):
    case = random_case(m, n, k, seed=3 * m + n + k)
    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype, config=forced(m))
    check(out, case, out_dtype)


def test_token_tile_16_holds_m_up_to_8():
    """The 16-token tile at M <= 8 (its second tile all padding) gives the 8-token tile's result."""
    import cupy
    case = random_case(5, 300, 1040, seed=9)
    narrow = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=forced(5))
    wide = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=Gemv(16, 8, 2))
    check(wide, case)
    assert bool(cupy.array_equal(narrow.view(cupy.uint16), wide.view(cupy.uint16)))


@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("m,n,k", [(1, 8, 16), (7, 130, 1040), (16, 256, 4096)], ids=str)
def test_exact_dyadic(m, n, k, out_dtype):
    """Power-of-two inputs and scales: every partial sum is exact, so the output equals the
    float64 reference rounded to the output type, bit for bit."""
    case = random_case(m, n, k, seed=17, dyadic=True)
    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype, config=forced(m))
    check_bit_exact(out, case, out_dtype)


@pytest.mark.parametrize("m,n,k,pad", [(1, 1, 16, 24), (9, 136, 1040, 24), (16, 300, 240, 20),
                                       (3, 17, 4112, 16)], ids=str)
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_nan_poisoned_borders(m, n, k, pad, out_dtype):
    """Inputs and output inside NaN-filled buffers: an out-of-bounds read shows as NaN in the
    result, an out-of-bounds write as a changed border."""
    check_poisoned(random_case(m, n, k, seed=5), pad, out_dtype, forced(m))


def test_bitwise_reproducible():
    """No atomics: the warps' partial sums are added in warp order."""
    import cupy
    case = random_case(16, 1536, 4096, seed=8)
    first = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=forced(16))
    for _ in range(3):
        again = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=forced(16))
        assert bool(cupy.array_equal(first.view(cupy.uint16), again.view(cupy.uint16)))


def test_more_tokens_than_the_tile_are_refused_before_any_launch():
    case = random_case(17, 128, 256, seed=1)
    with pytest.raises(ValueError, match="not valid"):
        fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=Gemv(16, 8, 2))
    case = random_case(9, 128, 256, seed=1)
    with pytest.raises(ValueError, match="not valid"):
        fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=forced(8))
