"""GPU numerics: NaN and Inf in A, B and the scales, zero scales, FP8 values at +-448 and
subnormals, bf16 / fp16 output overflow -- through the dispatcher and every kernel variant forced.

What holds (README, "Numerics"):
  * a NaN anywhere in A, B or a scale makes exactly the outputs it feeds NaN, as in the reference;
  * an Inf scale makes exactly the outputs it feeds non-finite (the kernel scales each 128-wide K
    block's sum, the reference each product, so Inf and NaN may trade places between them);
  * zero scales give exact zeros; +-448 and subnormal FP8 values are exact where the reference
    is representable;
  * outputs beyond the bf16 / fp16 range become Inf exactly where the reference's cast does.
"""
import numpy as np
import pytest

from generators import FP8_NAN, random_case

import fp8gemm
from fp8gemm import reference
from fp8gemm.dispatch import GemmDesc, Gemv, General, ShortK, SwapAB, Wg3, is_valid
from fp8gemm.testing import as_float64

pytestmark = pytest.mark.gpu

VARIANTS = {
    "dispatcher": None,
    "general": General(128, 4, 8),
    "split_k": General(32, 4, 8, splits=3),
    "swap_ab": SwapAB(16, 4, 8),
    "swap_ab_split_k": SwapAB(16, 4, 8, splits=3),
    "short_k": ShortK(64, 64),
    "gemv": Gemv(16, 8, 2),     # M <= 16 only
    "wg3": Wg3(128, 3, 8),     # bf16 / fp16 out only
}
SHAPES = [(70, 300, 400), (5, 200, 1040), (70, 300, 240)]   # M, N, K tails; K over several 128-blocks


def k_for(variant, k):
    """The tests' K, cut to 240 (two K blocks, the second partial) for the short-K kernel."""
    return min(k, 240) if variant == "short_k" else k
TOL = {"bfloat16": 4e-3, "float16": 1e-3, "float32": 1e-4}


def run(case, variant, out_dtype="bfloat16", a=None, b=None, sa=None, sb=None):
    cand = VARIANTS[variant]
    m, k = case.a.shape
    n = case.b.shape[0]
    if cand is not None and not is_valid(GemmDesc(m, n, k, out_dtype), cand):
        pytest.skip(f"{variant} does not admit M={m} N={n} K={k}")
    out = fp8gemm.matmul(case.a if a is None else a, case.b if b is None else b,
                         case.a_scale if sa is None else sa, case.b_scale if sb is None else sb,
                         out_dtype=out_dtype, config=cand)
    return as_float64(out)


def check_nonfinite_pattern(got, ref, out_dtype="bfloat16", exact_nan=True):
    """The non-finite outputs sit exactly where the reference's are (NaN where NaN if
    ``exact_nan``); the finite rest is within tolerance; some but not all are non-finite."""
    import cupy
    bad_ref = ~cupy.isfinite(ref)
    assert 0 < int(bad_ref.sum()) < ref.size, "degenerate case: the planted value fed no output or all"
    assert bool((~cupy.isfinite(got) == bad_ref).all()), "non-finite outputs differ from the reference's"
    if exact_nan:
        assert bool((cupy.isnan(got) == cupy.isnan(ref)).all()), "NaN outputs differ from the reference's"
    ok = ~bad_ref
    err = reference.rel_fro_error(got[ok], ref[ok])
    assert err <= TOL[out_dtype], f"finite part: relative error {err:.2e}"


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
@pytest.mark.parametrize("where", ["a", "b", "a_scale", "b_scale"])
def test_nan_propagates_like_the_reference(where, m, n, k, variant):
    import cupy
    case = random_case(m, n, k, seed=21)
    a, b = case.a.copy(), case.b.copy()
    sa, sb = case.a_scale.copy(), case.b_scale.copy()
    if where == "a":
        a[m // 2, k - 3] = FP8_NAN                     # one row of C
    elif where == "b":
        b[n - 1, 130] = FP8_NAN | 0x80                 # one column (negative NaN byte 0xFF)
    elif where == "a_scale":
        sa[m - 1, sa.shape[1] - 1] = np.nan            # one row
    else:
        sb[sb.shape[0] - 1, 0] = np.nan                # the last block of columns
    ref = reference.matmul(a, b, sa, sb, xp=cupy)
    got = run(case, variant, a=a, b=b, sa=sa, sb=sb)
    check_nonfinite_pattern(got, ref)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("where", ["a_scale", "b_scale"])
def test_inf_scale_gives_nonfinite_where_the_reference_does(where, variant):
    import cupy
    m, n, k = 70, 300, k_for(variant, 400)
    case = random_case(m, n, k, seed=22)
    sa, sb = case.a_scale.copy(), case.b_scale.copy()
    if where == "a_scale":
        sa[3, 1] = np.inf
    else:
        sb[1, min(2, sb.shape[1] - 1)] = -np.inf      # K block 2 (short-K: 1, its last)
    ref = reference.matmul(case.a, case.b, sa, sb, xp=cupy)
    got = run(case, variant, sa=sa, sb=sb)
    check_nonfinite_pattern(got, ref, exact_nan=False)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_zero_scales_give_exact_zeros(variant):
    import cupy
    m, n, k = 70, 300, k_for(variant, 400)
    case = random_case(m, n, k, seed=23)
    sa, sb = case.a_scale.copy(), case.b_scale.copy()
    sa[7, :] = 0                   # row 7 of C
    sb[2, :] = 0                   # columns 256..299 of C
    got = run(case, variant, sa=sa, sb=sb)
    ref = reference.matmul(case.a, case.b, sa, sb, xp=cupy)
    assert bool((got[7, :] == 0).all()) and bool((got[:, 256:] == 0).all())
    keep = cupy.ones(got.shape, dtype=bool)
    keep[7, :] = False
    keep[:, 256:] = False
    err = reference.rel_fro_error(got[keep], ref[keep])
    assert err <= TOL["bfloat16"], f"relative error {err:.2e} outside the zeroed rows and columns"


def _bytes_case(m, n, k, values, seed, scale_exp=(0, 1)):
    """A, B drawn from the FP8 bytes ``values``; scales 2^U{scale_exp}: power-of-two scales."""
    import cupy
    from fp8gemm.testing import Case
    rng = np.random.default_rng(seed)
    table = np.asarray(values, dtype=np.uint8)
    lo, hi = scale_exp
    kb, nb = -(-k // 128), -(-n // 128)
    return Case(cupy.asarray(table[rng.integers(0, len(table), size=(m, k))]),
                cupy.asarray(table[rng.integers(0, len(table), size=(n, k))]),
                cupy.asarray((2.0 ** rng.integers(lo, hi + 1, size=(m, kb))).astype(np.float32)),
                cupy.asarray((2.0 ** rng.integers(lo, hi + 1, size=(nb, kb))).astype(np.float32)))


FP8_448 = [0x7E, 0xFE]                                     # +-448, the largest finite E4M3
FP8_SUBNORMAL = [e for e in range(1, 8)] + [0x80 | e for e in range(1, 8)]   # +-k * 2^-9


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("values,scale_exp", [(FP8_448, (-20, -18)), (FP8_SUBNORMAL, (6, 8))],
                         ids=["448", "subnormal"])
def test_extreme_fp8_values_are_exact(values, scale_exp, variant):
    """All products share one magnitude class, so every partial sum is exact in FP32: the FP32
    output must equal the reference bit for bit (scales keep |C| near 1)."""
    import cupy
    m, n, k = 70, 300, k_for(variant, 400)
    case = _bytes_case(m, n, k, values, seed=24, scale_exp=scale_exp)
    ref = case.reference(cupy)
    assert float(cupy.abs(ref).max()) > 0
    got = run(case, variant, out_dtype="float32")
    assert bool((got == ref.astype(cupy.float32).astype(cupy.float64)).all()), "not bit-exact"


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("out_dtype,shift", [("float16", 13), ("bfloat16", 121)])
def test_output_overflow_becomes_inf_like_the_reference_cast(out_dtype, shift, variant):
    """Dyadic operands (exact sums) scaled so that part of C lies beyond the output type's range:
    the result equals the reference cast to that type bit for bit, Inf included. K = 128 keeps
    the FP32 running sum from overflowing before the last block (the reference has no such sum),
    and the scale products as_i * bs_j (at most 2^(shift + 4)) stay inside FP32's range."""
    import cupy
    m, n, k = 70, 300, 128
    case = random_case(m, n, k, seed=25, dyadic=True)
    sa = case.a_scale * np.float32(2.0 ** (shift // 2))
    sb = case.b_scale * np.float32(2.0 ** (shift - shift // 2))
    ref = reference.matmul(case.a, case.b, sa, sb, xp=cupy)
    np_dt = reference.BFLOAT16 if out_dtype == "bfloat16" else np.float16
    want = ref.get().astype(np_dt).astype(np.float64)
    inf = np.isinf(want)
    assert 0 < int(inf.sum()) < want.size, "degenerate case: no overflow or all overflow"
    got = run(case, variant, out_dtype=out_dtype, sa=sa, sb=sb).get()
    assert np.array_equal(got, want), "overflow differs from the reference's cast"


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_every_variant_is_bitwise_reproducible(variant, out_dtype):
    """Five runs, each on its own stream with other work in between, give identical bits."""
    import cupy
    m, n, k = 37, 1000, k_for(variant, 2064)
    case = random_case(m, n, k, seed=26)
    other = random_case(300, 512, 1024, seed=27)
    first = run(case, variant, out_dtype=out_dtype)
    assert float(cupy.abs(first).max()) > 0
    for i in range(5):
        with cupy.cuda.Stream(non_blocking=True) as s:
            fp8gemm.matmul(other.a, other.b, other.a_scale, other.b_scale)
            again = run(case, variant, out_dtype=out_dtype)
            s.synchronize()
        assert bool((again == first).all()), f"run {i + 1} differs"
