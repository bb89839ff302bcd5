"""GPU tests of the 256-row kernel (sm90_fp8_gemm_tall: two waves of two consumer warpgroups)
forced on every wave boundary: M tails that leave a warpgroup, a wave or the upper A box without
rows, N and K tails, bf16 and fp16 out, TMA and direct stores; against the float64 reference, bit
for bit against the general kernel's 128-row tiles (same promotions in the same order), bit-exact
on dyadic inputs, inside NaN-poisoned buffers; and its grouped mode in both layouts, fp32 out with
coarse promotion included."""
import numpy as np
import pytest

from generators import random_case
from test_matmul_general import check, check_bit_exact, check_poisoned

import fp8gemm
from fp8gemm.dispatch import General, Tall

pytestmark = pytest.mark.gpu

# M: inside wave 0's first warpgroup (1, 64), its second (100), into the upper box (129, 150),
# into wave 1's second warpgroup (200), one whole tile (256), a second tile (300), many tiles
# with a tail (4100); N and K tails.
SHAPES = [(1, 128, 128), (64, 256, 256), (100, 136, 400), (129, 256, 1024), (150, 300, 1040), (200, 256, 512),
          (256, 384, 4096), (300, 1000, 1536), (4100, 4096, 4096)]
# (block_n, stages, raster group, scale slots, one loop)
CONFIGS = [(128, 3, 8, 1, 0), (128, 3, 1, 1, 0), (64, 4, 8, 1, 0), (128, 3, 8, 0, 0), (128, 3, 8, 1, 1)]


@pytest.mark.parametrize("block_n,stages,group_m,slots,one_loop", CONFIGS, ids=str)
@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
def test_forced_bf16(m, n, k, block_n, stages, group_m, slots, one_loop):
    case = random_case(m, n, k, seed=m + n + k)
    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale,
                         config=Tall(block_n, stages, group_m, slots, one_loop))
    check(out, case)


@pytest.mark.parametrize("m,n,k", SHAPES[:6], ids=str)
def test_forced_fp16(m, n, k):
    case = random_case(m, n, k, seed=2 * m + n + k)
    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype="float16", config=Tall())
    check(out, case, "float16")


@pytest.mark.parametrize("slots,one_loop", [(1, 0), (0, 0), (1, 1)], ids=["slots", "loads", "one-loop"])
@pytest.mark.parametrize("m,n,k", [(150, 256, 1024), (300, 1000, 1536), (1000, 512, 4096)], ids=str)
def test_equals_general_bitwise(m, n, k, slots, one_loop):
    """The 128-row general tiles at block_n 128 run the same 4 wgmma and the same promotion per
    K block: the same bits, TMA store (N a multiple of 8) or direct, scales by slots or loads;
    an M-major As too (read in place by either)."""
    import cupy
    case = random_case(m, n, k, seed=11 + m)
    sa_mmajor = cupy.asfortranarray(case.a_scale)
    got = fp8gemm.matmul(case.a, case.b, sa_mmajor if slots else case.a_scale, case.b_scale,
                         config=Tall(128, 3, 8, slots, one_loop))
    want = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=General(128, 4, 8))
    assert bool((cupy.asarray(got).view(cupy.uint16) == cupy.asarray(want).view(cupy.uint16)).all())


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("m,n,k", [(1, 128, 16), (200, 300, 1040)], ids=str)
def test_exact_dyadic(m, n, k, out_dtype):
    case = random_case(m, n, k, seed=17, dyadic=True)
    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype, config=Tall())
    check_bit_exact(out, case, out_dtype)


@pytest.mark.parametrize("m,n,k,pad", [(1, 1, 16, 24), (200, 300, 1040, 24), (200, 300, 1040, 20),
                                       (130, 1000, 256, 24), (300, 136, 512, 24)], ids=str)
def test_nan_poisoned_borders(m, n, k, pad):
    check_poisoned(random_case(m, n, k, seed=5), pad, "bfloat16", Tall())


def test_refused():
    """fp32 out (coarse promotion only), a width the kernel has no instantiation for, a ring that
    does not fit beside the TMA-store staging and the scale slots, and fewer stages than scale
    warps."""
    case = random_case(64, 128, 256, seed=1)
    for cfg, dt in ((Tall(), "float32"), (Tall(96, 3, 8), "bfloat16"), (Tall(128, 4, 8), "bfloat16"),
                    (Tall(128, 2, 8), "bfloat16")):
        with pytest.raises(ValueError, match="not valid"):
            fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=dt, config=cfg)


# ---- grouped mode --------------------------------------------------------------------------------

# Group ends at every wave boundary: empty, 1, one warpgroup (63-65), one wave (127-129), three
# warpgroups (191-193), one tile (255-257), and more than a tile.
WAVE_SIZES = [0, 1, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 300, 0]


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("n,k", [(256, 512), (300, 1040)], ids=str)
def test_grouped_contiguous(n, k, out_dtype):
    """Against the reference (fp32: coarse promotion, precise_fp32=False, within the bf16 bound)
    and bit for bit against the general kernel's grouped 128-row tiles."""
    import cupy
    from test_grouped_gpu import check_rows, contiguous_case, reference_contiguous

    from generators import to_cupy_f64
    a, sa, b, sb, offsets = contiguous_case(WAVE_SIZES, n, k, seed=n + k)
    precise = out_dtype != "float32"
    run = lambda cfg: fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, out_dtype=out_dtype,  # noqa: E731
                                                        precise_fp32=precise, config=cfg)
    got = run(Tall(128, 4, 8))
    check_rows(to_cupy_f64(got), reference_contiguous(a, sa, b, sb, offsets), "bfloat16")
    width = cupy.uint32 if out_dtype == "float32" else cupy.uint16
    one_loop = run(Tall(128, 4, 8, 1, 1))              # dead waves computed, not stored: the same bits
    assert bool((cupy.asarray(one_loop).view(width) == cupy.asarray(got).view(width)).all()), "one loop differs"
    same = run(General(128, 4, 8))
    assert bool((cupy.asarray(got).view(width) == cupy.asarray(same).view(width)).all()), "differs from General"


@pytest.mark.parametrize("n,k", [(256, 512), (300, 1040)], ids=str)
def test_grouped_masked_poisoned(n, k):
    """The masked layout with NaN in every padding row of A, its scales and out=: the groups'
    rows within the fp16 bound, the padding rows never written."""
    import cupy
    from test_grouped_gpu import check_rows, contiguous_case, masked_from_contiguous, reference_contiguous

    from generators import to_cupy_f64
    a, sa, b, sb, offsets = contiguous_case(WAVE_SIZES, n, k, seed=n + k + 1)
    am, sam, counts = masked_from_contiguous(a, sa, offsets)
    out = cupy.full((len(WAVE_SIZES), am.shape[1], n), cupy.nan, dtype=cupy.float16)
    res = fp8gemm.grouped_matmul_masked(am, b, sam, sb, counts, out=out, config=Tall(128, 4, 8))
    assert res is out
    got = cupy.concatenate([to_cupy_f64(out[g, :c]) for g, c in enumerate(WAVE_SIZES)])
    check_rows(got, reference_contiguous(a, sa, b, sb, offsets), "float16")
    valid = np.zeros(out.shape[:2], dtype=bool)
    for g, c in enumerate(WAVE_SIZES):
        valid[g, :c] = True
    assert bool(cupy.isnan(out[cupy.asarray(~valid)]).all()), "a padding row was written"


def test_grouped_fp32_needs_coarse_promotion():
    from test_grouped_gpu import contiguous_case
    a, sa, b, sb, offsets = contiguous_case([3, 4], 256, 512, seed=3)
    with pytest.raises(ValueError, match="precise_fp32=False"):
        fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, out_dtype="float32", config=Tall())
