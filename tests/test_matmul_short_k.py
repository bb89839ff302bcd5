"""GPU tests of the short-K kernel (sm90_fp8_gemm_short_k, K <= 256) forced on every tile shape,
K tail, output dtype and store path: against the float64 reference, bit-exact on dyadic inputs,
inside NaN-poisoned buffers, and through the dispatcher's own choice."""
import pytest

from generators import random_case
from test_matmul_general import check, check_bit_exact, check_poisoned

import fp8gemm
from fp8gemm.dispatch import ShortK, select

pytestmark = pytest.mark.gpu

S = "sm90_fp8_gemm_short_k"
TILES = [(64, 16), (64, 128), (128, 32), (128, 64), (128, 128)]
# M, N tails around both tile sizes; K: one wgmma step, one partial and one whole K block, two
# blocks with the second partial, exactly two.
SHAPES = [(1, 1, 16), (63, 100, 112), (65, 136, 128), (129, 257, 144), (300, 520, 240), (200, 4096, 256)]


def forced(block_m, block_n):
    return ShortK(block_m, block_n)


@pytest.mark.parametrize("block_m,block_n", TILES, ids=str)
@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
def test_forced_tiles_bf16(m, n, k, block_m, block_n):
    case = random_case(m, n, k, seed=m + n + k + block_n)
    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=forced(block_m, block_n))
    check(out, case)


@pytest.mark.parametrize("out_dtype", ["float16", "float32"])
@pytest.mark.parametrize("block_m,block_n", [(64, 64), (128, 128)], ids=str)
@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
def test_forced_out_dtypes(m, n, k, block_m, block_n, out_dtype):
    """fp32 takes the fine promotion (one wgmma per group, 8 groups in turn)."""
    case = random_case(m, n, k, seed=3 * m + n + k)
    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype,
                         config=forced(block_m, block_n))
    check(out, case, out_dtype)


@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("m,n,k", [(1, 8, 16), (130, 260, 240), (256, 128, 256)], ids=str)
def test_exact_dyadic(m, n, k, out_dtype):
    """Power-of-two inputs and scales: every partial sum is exact, so the output equals the
    float64 reference rounded to the output type, bit for bit."""
    case = random_case(m, n, k, seed=17, dyadic=True)
    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype,
                         config=forced(128, 64))
    check_bit_exact(out, case, out_dtype)


@pytest.mark.parametrize("m,n,k,pad", [(1, 1, 16, 24), (70, 136, 240, 24), (200, 300, 256, 20),
                                       (200, 256, 256, 24), (130, 304, 144, 16)], ids=str)
@pytest.mark.parametrize("block_m,block_n", [(64, 64), (128, 128)], ids=str)
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_nan_poisoned_borders(m, n, k, pad, block_m, block_n, out_dtype):
    """Inputs and output inside NaN-filled buffers: an out-of-bounds read shows as NaN in the
    result, an out-of-bounds write as a changed border. Store paths: TMA at (70, 136), (200, 256)
    and (130, 304); direct at N = 1 (pitch) and at (200, 300, pad 20), where the pitch is aligned
    but a row of 300 bf16 does not end on a 16-byte boundary (launcher.tma_store_ok)."""
    check_poisoned(random_case(m, n, k, seed=5), pad, out_dtype, forced(block_m, block_n))


def test_bitwise_reproducible():
    import cupy
    case = random_case(384, 1536, 256, seed=8)
    cfg = forced(128, 64)
    first = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=cfg)
    for _ in range(3):
        again = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=cfg)
        assert bool(cupy.array_equal(first.view(cupy.uint16), again.view(cupy.uint16)))


def test_too_long_k_is_refused_before_any_launch():
    case = random_case(128, 128, 384, seed=1)
    with pytest.raises(ValueError, match="not valid"):
        fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=forced(128, 128))


@pytest.mark.parametrize("m,n", [(100, 512), (256, 4096), (512, 8192), (2048, 1536)], ids=str)
def test_dispatcher_short_k_choice(m, n):
    """The fallback's short-K choice (no table) and the shipped table's choice are both correct."""
    case = random_case(m, n, 256, seed=m + n)
    for gpu in ("none", "h200"):
        cand = select(m, n, 256, gpu=gpu)
        out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=cand)
        check(out, case)
    assert select(m, n, 256, gpu="none").variant == S
