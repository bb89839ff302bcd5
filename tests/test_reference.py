"""CPU: the host reference against a naive loop, quantizer round trips, exact dyadic products,
and the error metrics (which must be able to fail)."""
import ml_dtypes
import numpy as np
import pytest

from generators import random_case

from fp8gemm import reference


@pytest.mark.parametrize("m,n,k", [(1, 1, 16), (3, 5, 144), (7, 130, 272), (2, 257, 128)])
def test_matmul_matches_naive_loop(m, n, k):
    case = random_case(m, n, k, seed=m + n + k, xp=np)
    fast = reference.matmul(case.a, case.b, case.a_scale, case.b_scale)
    slow = reference.matmul_naive(case.a, case.b, case.a_scale, case.b_scale)
    assert fast.shape == (m, n)
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=1e-12)
    assert np.abs(fast).max() > 0.05   # scales chose |C| ~ 1, not ~0


def test_fp8_decode_table():
    vals = reference.FP8_E4M3_DECODE
    assert vals[0x00] == 0.0 and vals[0x38] == 1.0 and vals[0xB8] == -1.0
    assert vals[0x7E] == 448.0 and vals[0xFE] == -448.0
    assert vals[0x01] == 2.0 ** -9            # smallest subnormal
    assert np.isnan(vals[0x7F]) and np.isnan(vals[0xFF])


def test_quantize_per_token_group_round_trip():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 300)).astype(np.float32) * np.array([[1e-3], [1], [10], [1e3], [0]])
    q, s = reference.quantize_per_token_group(x)
    assert q.dtype == ml_dtypes.float8_e4m3fn and q.shape == x.shape
    assert s.dtype == np.float32 and s.shape == (5, 3)
    back = reference.dequantize_a(q, s)
    for r in range(4):
        err = np.linalg.norm(back[r] - x[r]) / np.linalg.norm(x[r])
        assert err < 0.05, err            # E4M3 keeps 3 mantissa bits: ~2-3% relative
    assert np.all(back[4] == 0)
    # the largest |value| of each group maps to +-448 exactly
    g0 = np.abs(x[1, :128]).max()
    np.testing.assert_allclose(s[1, 0], g0 / 448.0, rtol=1e-6)


def test_quantize_per_block_round_trip_and_tail():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((200, 272)).astype(np.float32)
    q, s = reference.quantize_per_block(w)
    assert q.shape == w.shape and s.shape == (2, 3)
    back = reference.dequantize_b(q, s)
    assert np.linalg.norm(back - w) / np.linalg.norm(w) < 0.05
    np.testing.assert_allclose(s[1, 2], np.abs(w[128:, 256:]).max() / 448.0, rtol=1e-6)


def test_quantized_gemm_close_to_float_gemm():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((16, 512)).astype(np.float32)
    w = rng.standard_normal((256, 512)).astype(np.float32)
    qa, sa = reference.quantize_per_token_group(x)
    qb, sb = reference.quantize_per_block(w)
    c = reference.matmul(qa, qb, sa, sb)
    exact = x.astype(np.float64) @ w.T.astype(np.float64)
    assert reference.rel_fro_error(c, exact) < 0.08


def test_exact_dyadic_product_is_exact():
    case = random_case(4, 8, 256, seed=3, xp=np, dyadic=True)
    c = reference.matmul(case.a, case.b, case.a_scale, case.b_scale)
    # powers of two times small integers: float32 holds every entry exactly
    assert np.array_equal(c.astype(np.float32).astype(np.float64), c)
    assert np.abs(c).max() > 0


def test_out_dtype_cast():
    case = random_case(2, 3, 128, seed=4, xp=np)
    assert reference.matmul(case.a, case.b, case.a_scale, case.b_scale, "bfloat16").dtype == \
        ml_dtypes.bfloat16
    assert reference.matmul(case.a, case.b, case.a_scale, case.b_scale, np.float16).dtype == np.float16


def test_metrics_can_fail():
    ref = np.linspace(-1, 1, 100)
    assert reference.rel_fro_error(ref, ref) == 0.0
    assert reference.calc_diff(ref, ref) == pytest.approx(0.0, abs=1e-15)
    assert reference.rel_fro_error(np.zeros_like(ref), ref) == 1.0       # all-zero output fails
    assert reference.calc_diff(np.zeros_like(ref), ref) == 1.0
    assert reference.rel_fro_error(ref * (1 + 1e-2), ref) == pytest.approx(1e-2)
    assert np.isnan(reference.rel_fro_error(np.full_like(ref, np.nan), ref))


def test_rejects_non_fp8_inputs():
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        reference.fp8_to_float64(np.zeros(4, np.float16))
