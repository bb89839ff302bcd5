"""GPU tests of fp8gemm.matmul (the general kernel): the whole trace, tails, output dtypes, exact
dyadic cases, NaN-poisoned borders, scale layouts, frameworks, out=, M = 0, determinism."""
import types

import numpy as np
import pytest

from generators import FP8_NAN, outside, poisoned, random_case, to_cupy_f64, trace_shapes

import fp8gemm
from fp8gemm import reference
from fp8gemm.dispatch import GemmDesc, General, SwapAB

pytestmark = pytest.mark.gpu

TOL = {"bfloat16": 4e-3, "float16": 1e-3, "float32": 1e-4}
CALC_DIFF_TOL = 1e-5


MIN_ELEMENTS_FOR_RELATIVE = 64


def check(out, case, out_dtype="bfloat16"):
    """Relative Frobenius error and calc_diff against the float64 reference.

    NOTES: the tensor cores sum FP8 products with ~14 mantissa bits relative to the largest
    product, so the error bound of one output element is relative to sum |a_k b_k|, not to
    |sum a_k b_k|. Over a matrix the two agree; for an output of a handful of elements one
    cancelling sum can dominate. Below 64 elements the FP32 check therefore divides by the
    norm of |A| |B|^T (the magnitude sum) instead of the norm of A B^T. bf16 / fp16 outputs and
    every larger output use the plain relative Frobenius error.
    """
    import cupy
    ref = case.reference(cupy)
    got = to_cupy_f64(out)
    assert got.shape == ref.shape
    assert bool(cupy.isfinite(got).all()), "non-finite values in the output"
    err = reference.rel_fro_error(got, ref)
    if out_dtype == "float32" and ref.size < MIN_ELEMENTS_FOR_RELATIVE:
        magnitude = cupy.abs(reference.dequantize_a(case.a, case.a_scale, cupy)) @ \
            cupy.abs(reference.dequantize_b(case.b, case.b_scale, cupy)).T
        err = float(cupy.linalg.norm(got - ref) / cupy.linalg.norm(magnitude))
    assert err <= TOL[out_dtype], f"relative Frobenius error {err:.3e} > {TOL[out_dtype]}"
    diff = reference.calc_diff(got, ref)
    assert diff <= CALC_DIFF_TOL, f"calc_diff {diff:.3e} > {CALC_DIFF_TOL}"
    return err


@pytest.mark.parametrize("m,n,k", trace_shapes(), ids=lambda v: str(v))
def test_trace_shape_bf16(m, n, k):
    case = random_case(m, n, k, seed=m * 7 + n * 3 + k)
    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale)
    check(out, case)


TAIL_SHAPES = [(1, 1, 16), (3, 8, 112), (127, 100, 144), (129, 136, 192), (200, 576, 400),
               (64, 1000, 4096 + 16), (257, 33, 256), (5, 4096, 4096 + 112)]


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("m,n,k", TAIL_SHAPES, ids=lambda v: str(v))
def test_tails_out_dtypes(m, n, k, out_dtype):
    case = random_case(m, n, k, seed=m + n + k)
    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype)
    check(out, case, out_dtype)


@pytest.mark.parametrize("block_n", [16, 32, 64, 128])
@pytest.mark.parametrize("m,n,k", [(1, 1, 16), (129, 136, 192), (300, 520, 1040), (17, 4096, 256)],
                         ids=lambda v: str(v))
def test_forced_block_n(m, n, k, block_n):
    case = random_case(m, n, k, seed=block_n)
    cfg = General(block_n=block_n, stages=4, group_m=8)
    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=cfg)
    check(out, case)


# 64-row tiles (one consumer warpgroup): every tile width, ring depths from 2 to the most, K splits
# (uneven and empty), M / N / K tails, every output dtype, the TMA-store and direct epilogues.
TILE64 = [General(16, 16, 8, 1, 64), General(32, 16, 1, 1, 64), General(64, 13, 8, 1, 64), General(128, 8, 8, 1, 64),
          General(32, 2, 8, 1, 64), General(64, 6, 8, 3, 64), General(16, 16, 8, 12, 64)]


@pytest.mark.parametrize("cfg", TILE64, ids=lambda c: c.label())
@pytest.mark.parametrize("m,n,k", [(1, 1, 16), (64, 4096, 4096), (65, 136, 192), (100, 520, 1040 + 16),
                                   (256, 1536, 2048), (300, 33, 272)], ids=lambda v: str(v))
def test_forced_64_row_tiles(m, n, k, cfg):
    case = random_case(m, n, k, seed=cfg.block_n + m)
    for out_dtype in ("bfloat16", "float16", "float32"):
        if cfg.is_valid(GemmDesc(m, n, k, out_dtype)):
            check(fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype, config=cfg),
                  case, out_dtype)


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_64_row_tiles_poisoned_and_reproducible(out_dtype):
    """NaN-poisoned padding around every input and the output (pitch N + 24: direct stores and,
    bf16, TMA stores are both taken at N = 256); split-K bitwise equal over repeated runs."""
    import cupy
    for n in (256, 300):
        check_poisoned(random_case(70, n, 1040, seed=n), 24, out_dtype, General(64, 12, 8, 1, 64))
    case = random_case(48, 4096, 4096, seed=4)
    cfg = General(32, 16, 8, 4, 64)
    first = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype, config=cfg)
    for _ in range(3):
        again = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype, config=cfg)
        assert bool((first.view(cupy.uint8) == again.view(cupy.uint8)).all())


@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("m,n,k", [(1, 8, 16), (130, 260, 1024 + 48), (256, 128, 2048)])
def test_exact_dyadic(m, n, k, out_dtype):
    """Power-of-two inputs and scales: every partial sum is exact in fp32, so the output must
    equal the float64 reference rounded to the output type, bit for bit."""
    case = random_case(m, n, k, seed=11, dyadic=True)
    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype)
    check_bit_exact(out, case, out_dtype)


def check_bit_exact(out, case, out_dtype):
    """The output equals the float64 reference rounded to ``out_dtype``, bit for bit."""
    import cupy
    ref = case.reference(cupy).get()
    want = ref.astype(reference.BFLOAT16 if out_dtype == "bfloat16" else out_dtype)
    got = out.get() if out_dtype != "bfloat16" else out.view(cupy.uint16).get().view(reference.BFLOAT16)
    assert np.abs(ref).max() > 0, "degenerate case: all-zero reference"
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), "not bit-exact"


@pytest.mark.parametrize("m,n,k,pad", [(1, 1, 16, 24), (70, 136, 400, 24), (200, 300, 1040, 24),
                                       (200, 300, 1040, 20), (130, 1000, 256, 24)])
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_nan_poisoned_borders(m, n, k, pad, out_dtype):
    """Every input and the output sit inside NaN-filled buffers: an out-of-bounds read shows as
    NaN in the result, an out-of-bounds write as a changed border. With pad 20 at N = 300 the
    output's row pitch is 16-byte aligned but its rows (600 B in bf16) do not end on a 16-byte
    boundary: a TMA store there once wrote 4 elements past each row (launcher.tma_store_ok)."""
    check_poisoned(random_case(m, n, k, seed=5), pad, out_dtype)


def check_poisoned(case, pad, out_dtype, config=None):
    """Run ``case`` with every input and the output inside NaN-filled buffers (the output's row
    pitch N + ``pad``), check the result and that no write landed outside the output view."""
    import cupy
    import torch
    m, n = case.a.shape[0], case.b.shape[0]
    a, _ = poisoned(case.a, FP8_NAN, pad_cols=32)
    b, _ = poisoned(case.b, FP8_NAN, pad_cols=32)
    sa, _ = poisoned(case.a_scale, np.nan, pad_cols=4, col0=2)
    sb, _ = poisoned(case.b_scale, np.nan, pad_cols=4, col0=2)
    # The output buffer in torch (bf16 NaN poison is simplest there); inputs stay CuPy.
    buf = torch.full((m + 2, n + pad), float("nan"), dtype=getattr(torch, out_dtype), device="cuda")
    view = buf[1:1 + m, 8:8 + n]
    res = fp8gemm.matmul(a, b, sa, sb, out=view, config=config)
    assert res is view
    check(view, case, out_dtype)
    border = outside(cupy.from_dlpack(buf.float()), 1, 8, m, n)
    assert bool(cupy.isnan(border).all()), "a write landed outside the output view"


def test_scale_layouts_read_in_place():
    """M-major a_scale and transposed b_scale (views, no copies) give the same result."""
    import cupy
    m, n, k = 200, 384, 1024
    case = random_case(m, n, k, seed=9)
    sa_mmajor = cupy.asfortranarray(case.a_scale)          # strides (1, M)
    sb_t = cupy.ascontiguousarray(case.b_scale.T).T        # strides (1, Nb)
    assert sa_mmajor.strides[0] == 4 and sb_t.strides[0] == 4
    base = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype="float32")
    other = fp8gemm.matmul(case.a, case.b, sa_mmajor, sb_t, out_dtype="float32")
    check(other, case, "float32")
    assert bool((base == other).all())


def test_cupy_int8_and_batch_dims():
    import cupy
    m, n, k = 24, 256, 512
    case = random_case(m, n, k, seed=3)
    a3 = case.a.view(cupy.int8).reshape(2, 3, 4, k)
    sa3 = case.a_scale.reshape(2, 3, 4, -1)
    out = fp8gemm.matmul(a3, case.b.view(cupy.int8), sa3, case.b_scale, out_dtype="float32")
    assert isinstance(out, cupy.ndarray) and out.shape == (2, 3, 4, n)
    check(out.reshape(m, n), case, "float32")


def test_torch_fp8_and_bytes_on_side_stream():
    import cupy
    import torch
    m, n, k = 100, 1536, 1024
    case = random_case(m, n, k, seed=4)
    ta = torch.from_dlpack(case.a).view(torch.float8_e4m3fn)
    tb = torch.from_dlpack(case.b).view(torch.float8_e4m3fn)
    tsa, tsb = torch.from_dlpack(case.a_scale), torch.from_dlpack(case.b_scale)
    cupy.cuda.Device().synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        out = fp8gemm.matmul(ta, tb, tsa, tsb)
        out_u8 = fp8gemm.matmul(ta.view(torch.uint8), tb.view(torch.uint8), tsa, tsb)
    side.synchronize()
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and out.device.type == "cuda"
    check(out, case)
    assert torch.equal(out, out_u8)


def test_jax_fp8_and_bytes():
    import jax
    import jax.numpy as jnp
    m, n, k = 64, 512, 1024
    case = random_case(m, n, k, seed=6)
    ja = jnp.asarray(case.a.get()).view(jnp.float8_e4m3fn)
    jb = jnp.asarray(case.b.get()).view(jnp.float8_e4m3fn)
    jsa, jsb = jnp.asarray(case.a_scale.get()), jnp.asarray(case.b_scale.get())
    out = fp8gemm.matmul(ja, jb, jsa, jsb)
    assert isinstance(out, jax.Array) and out.dtype == jnp.bfloat16 and out.shape == (m, n)
    check(out, case)
    out_u8 = fp8gemm.matmul(jnp.asarray(case.a.get()), jnp.asarray(case.b.get()), jsa, jsb,
                            out_dtype="float32")
    assert out_u8.dtype == jnp.float32
    check(out_u8, case, "float32")
    # The result is usable by JAX computations afterwards.
    assert float(jnp.abs(out.astype(jnp.float32)).sum()) > 0


def test_out_param_cupy_and_m_zero():
    import cupy
    m, n, k = 40, 200, 256
    case = random_case(m, n, k, seed=8)
    out = cupy.full((m, n), np.nan, dtype=cupy.float32)
    res = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out=out)
    assert res is out
    check(out, case, "float32")
    empty = fp8gemm.matmul(case.a[:0], case.b, case.a_scale[:0], case.b_scale)
    assert isinstance(empty, cupy.ndarray) and empty.shape == (0, n)


def test_m_zero_torch_and_jax():
    import jax.numpy as jnp
    import torch
    k, n = 256, 128
    t = fp8gemm.matmul(torch.zeros((0, k), dtype=torch.float8_e4m3fn, device="cuda"),
                       torch.zeros((n, k), dtype=torch.float8_e4m3fn, device="cuda"),
                       torch.zeros((0, 2), device="cuda"), torch.ones((1, 2), device="cuda"))
    assert isinstance(t, torch.Tensor) and tuple(t.shape) == (0, n)
    j = fp8gemm.matmul(jnp.zeros((0, k), jnp.float8_e4m3fn), jnp.zeros((n, k), jnp.float8_e4m3fn),
                       jnp.zeros((0, 2), jnp.float32), jnp.ones((1, 2), jnp.float32))
    assert j.shape == (0, n)


def test_deterministic():
    import cupy
    case = random_case(1000, 1536, 4096, seed=12)
    first = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype="float32")
    for _ in range(3):
        again = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype="float32")
        assert bool((again == first).all())
    assert float(cupy.abs(first).max()) > 0


def test_invalid_forced_config_is_refused():
    case = random_case(8, 128, 256, seed=2)
    cfg = General(block_n=128, stages=6, group_m=8)
    with pytest.raises(ValueError, match="not valid"):
        fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype="float32", config=cfg)


def test_tma_store_and_direct_store_agree():
    """Aligned outputs take the TMA-store epilogue, an odd row pitch the direct stores."""
    import cupy
    m, n, k = 300, 520, 1024
    case = random_case(m, n, k, seed=13)
    fast = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype="float32")
    buf = cupy.full((m, n + 1), np.nan, dtype=cupy.float32)     # pitch 521 floats: not 16-B
    slow = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out=buf[:, :n])
    check(slow, case, "float32")
    assert bool((fast == slow).all())
    assert bool(cupy.isnan(buf[:, n]).all())


def test_bad_input_on_gpu_never_reaches_a_kernel():
    import cupy
    import torch
    case = random_case(8, 128, 256, seed=1)
    with pytest.raises(ValueError, match="a_scale must have shape"):
        fp8gemm.matmul(case.a, case.b, case.a_scale[:, :1], case.b_scale)
    with pytest.raises(ValueError, match="contiguous along K"):
        fp8gemm.matmul(cupy.asfortranarray(case.a), case.b, case.a_scale, case.b_scale)
    with pytest.raises(ValueError, match="on the CPU"):
        fp8gemm.matmul(torch.zeros((8, 256), dtype=torch.float8_e4m3fn), case.b, case.a_scale,
                       case.b_scale)
    with pytest.raises(TypeError, match="float32"):
        fp8gemm.matmul(case.a, case.b, case.a_scale.astype(cupy.float16), case.b_scale)


@pytest.mark.parametrize("splits", [2, 3, 8, 12])
@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096 + 16), (37, 1000, 2048), (130, 576, 7168), (5, 8, 400)],
                         ids=lambda v: str(v))
def test_forced_split_k(m, n, k, splits):
    """Split-K with uneven and empty splits (K blocks not divisible by the split count)."""
    case = random_case(m, n, k, seed=splits * 3 + m)
    cfg = General(block_n=128, stages=4, group_m=8, splits=splits)
    for out_dtype in ("bfloat16", "float32"):
        out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype, config=cfg)
        check(out, case, out_dtype)


def test_split_k_bitwise_reproducible():
    import cupy
    case = random_case(64, 4096, 4096, seed=21)
    cfg = General(block_n=128, stages=4, group_m=8, splits=4)
    first = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype="float32", config=cfg)
    for _ in range(5):
        again = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype="float32", config=cfg)
        assert bool((again == first).all())
    check(first, case, "float32")
    assert float(cupy.abs(first).max()) > 0


@pytest.mark.parametrize("n,k", [(512, 4096), (4096, 1024), (576, 7168)])
def test_every_m_1_to_300(n, k):
    """The dispatcher's choice (split or not) for every M from 1 to 300."""
    import cupy
    full = random_case(300, n, k, seed=n + k)
    ref_full = full.reference(cupy)
    for m in range(1, 301):
        out = fp8gemm.matmul(full.a[:m], full.b, full.a_scale[:m], full.b_scale, out_dtype="float32")
        got = to_cupy_f64(out)
        ref = ref_full[:m]
        err = float(cupy.linalg.norm(got - ref) / cupy.linalg.norm(ref))
        assert err <= TOL["float32"] or m * n < MIN_ELEMENTS_FOR_RELATIVE, f"M={m}: {err:.2e}"


@pytest.mark.parametrize("block_n,splits", [(8, 1), (16, 3), (32, 1), (64, 2)])
@pytest.mark.parametrize("m,n,k", [(1, 1, 16), (3, 200, 144), (9, 576, 1040), (33, 1000, 2048),
                                   (64, 4096, 256), (100, 136, 512)], ids=lambda v: str(v))
def test_forced_swap_ab(m, n, k, block_n, splits):
    """Swap-AB (C^T = B A^T) on M, N and K tails, token tiles narrower and wider than M."""
    case = random_case(m, n, k, seed=block_n + m)
    cfg = SwapAB(block_n=block_n, stages=4, group_m=8, splits=splits)
    for out_dtype in ("bfloat16", "float32"):
        out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype, config=cfg)
        check(out, case, out_dtype)


def test_swap_ab_poisoned_output_and_scale_layouts():
    import cupy
    import torch
    m, n, k = 20, 300, 640
    case = random_case(m, n, k, seed=31)
    sa = cupy.asfortranarray(case.a_scale)
    buf = torch.full((m + 2, n + 24), float("nan"), dtype=torch.bfloat16, device="cuda")
    view = buf[1:1 + m, 8:8 + n]
    cfg = SwapAB(block_n=32, stages=4, group_m=8, splits=2)
    fp8gemm.matmul(case.a, case.b, sa, case.b_scale, out=view, config=cfg)
    check(view, case)
    border = outside(cupy.from_dlpack(buf.float()), 1, 8, m, n)
    assert bool(cupy.isnan(border).all()), "a write landed outside the output view"


# swap-AB's 64-row tiles (one consumer warpgroup, SwapAB.block_m): every token tile, rings from 2
# to the most, K splits (uneven, more than the K blocks, the tail split), M / N / K tails, every
# output dtype.
SWAP64 = [SwapAB(8, 16, 1, 1, 64), SwapAB(16, 4, 8, 3, 64), SwapAB(32, 8, 1, 1, 64), SwapAB(64, 14, 1, 2, 64),
          SwapAB(8, 2, 1, 12, 64), SwapAB(16, 10, 1, 0, 64)]


@pytest.mark.parametrize("cfg", SWAP64, ids=lambda c: c.label())
@pytest.mark.parametrize("m,n,k", [(1, 1, 16), (3, 200, 144), (9, 576, 1040), (33, 1000, 2048), (64, 4096, 256),
                                   (65, 136, 512), (40, 9000, 2048 + 32)], ids=lambda v: str(v))
def test_forced_swap_ab_64_rows(m, n, k, cfg):
    """Swap-AB's 64-row tiles on M, N and K tails, token tiles narrower and wider than M; odd
    tiles read the second half of a Bs block. (40, 9000, 2080) on 132 SMs: 141 weight tiles x 3
    token tiles of 16, 27 left over three waves, which the tail split halves (17 K blocks)."""
    case = random_case(m, n, k, seed=cfg.block_n + m + 64)
    for out_dtype in ("bfloat16", "float16", "float32"):
        check(fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype, config=cfg),
              case, out_dtype)


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_swap_ab_64_rows_poisoned_and_m_major_as(out_dtype):
    """64-row swap-AB tiles inside NaN-filled buffers (N = 300: five weight tiles, the last 44
    rows deep), As K-major and M-major, unsplit and split; split-K bitwise equal over repeated
    runs."""
    import cupy
    import torch
    m, n, k = 20, 300, 1040
    case = random_case(m, n, k, seed=64)
    for cfg in (SwapAB(16, 10, 1, 1, 64), SwapAB(32, 8, 1, 3, 64)):
        check_poisoned(case, 24, out_dtype, cfg)
        buf = torch.full((m + 2, n + 24), float("nan"), dtype=getattr(torch, out_dtype), device="cuda")
        view = buf[1:1 + m, 8:8 + n]
        fp8gemm.matmul(case.a, case.b, cupy.asfortranarray(case.a_scale), case.b_scale, out=view, config=cfg)
        check(view, case, out_dtype)
        assert bool(cupy.isnan(outside(cupy.from_dlpack(buf.float()), 1, 8, m, n)).all()), \
            "a write landed outside the output view"
    cfg = SwapAB(8, 10, 1, 4, 64)
    first = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype, config=cfg)
    for _ in range(3):
        again = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype, config=cfg)
        assert bool((first.view(cupy.uint8) == again.view(cupy.uint8)).all())


def test_plan_cache_sees_new_data_in_the_same_buffers():
    """A repeated call takes the cached plan; it must read the buffers' current contents."""
    import cupy
    first = random_case(48, 1536, 1024, seed=41)
    second = random_case(48, 1536, 1024, seed=42)
    a, b = first.a.copy(), first.b.copy()
    sa, sb = first.a_scale.copy(), first.b_scale.copy()
    out1 = fp8gemm.matmul(a, b, sa, sb)
    check(out1, first)
    a[...], b[...], sa[...], sb[...] = second.a, second.b, second.a_scale, second.b_scale
    out2 = fp8gemm.matmul(a, b, sa, sb)
    check(out2, second)
    out3 = fp8gemm.matmul(a, b, sa, sb, out_dtype="float32")     # another key: another plan
    check(out3, second, "float32")
    assert out2.data.ptr != out3.data.ptr and bool(cupy.isfinite(to_cupy_f64(out1)).all())


@pytest.mark.parametrize("m,n,k,splits", [(24, 4096, 4112, 4), (200, 512, 2048, 3)], ids=lambda v: str(v))
def test_torch_graph_first_call_inside_capture(m, n, k, splits):
    """No warm-up: the first call on a fresh stream (plan, module load, split-K workspace) happens
    inside torch.cuda.graph; replays then follow new data, and an eager call on the same stream
    afterwards (its own workspace) is right too."""
    import torch
    first, second = random_case(m, n, k, seed=61), random_case(m, n, k, seed=62)
    bufs = first.as_torch()
    bufs = tuple(x.clone() for x in bufs)
    cfg = (SwapAB if m <= 64 else General)(block_n=32, stages=4, group_m=8, splits=splits)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = fp8gemm.matmul(*bufs, config=cfg)
    for case in (first, second, first):
        for dst, src in zip(bufs, case.as_torch()):
            dst.copy_(src)
        graph.replay()
        torch.cuda.synchronize()
        check(out, case)
    with torch.cuda.stream(stream):
        eager = fp8gemm.matmul(*bufs, config=cfg)
    torch.cuda.synchronize()
    check(eager, first)


def test_out_param_fast_path_follows_new_data():
    """Repeated calls with the same out= take the plan cache; new data in the same buffers and a
    different out= array are both honoured."""
    import cupy
    m, n, k = 64, 512, 1024
    first, second = random_case(m, n, k, seed=81), random_case(m, n, k, seed=82)
    a, b, sa, sb = (x.copy() for x in (first.a, first.b, first.a_scale, first.b_scale))
    out = cupy.empty((m, n), dtype=cupy.float32)
    for case in (first, second, first):
        a[...], b[...], sa[...], sb[...] = case.a, case.b, case.a_scale, case.b_scale
        assert fp8gemm.matmul(a, b, sa, sb, out=out) is out
        check(out, case, "float32")
    other = cupy.full((m, n), cupy.nan, dtype=cupy.float32)
    assert fp8gemm.matmul(a, b, sa, sb, out=other) is other
    check(other, first, "float32")


def test_cupy_stream_capture_first_call():
    """CuPy stream capture, first call inside it, out= preallocated; replays with new data."""
    import cupy
    m, n, k = 40, 2048, 4096
    first, second = random_case(m, n, k, seed=71), random_case(m, n, k, seed=72)
    a, b, sa, sb = (x.copy() for x in (first.a, first.b, first.a_scale, first.b_scale))
    out = cupy.empty((m, n), dtype=cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        fp8gemm.matmul(a, b, sa, sb, out=out)
        graph = stream.end_capture()
    for case in (first, second):
        a[...], b[...], sa[...], sb[...] = case.a, case.b, case.a_scale, case.b_scale
        cupy.cuda.Device().synchronize()        # the copies ran on another stream
        graph.launch(stream)
        stream.synchronize()
        check(out, case, "float32")


@pytest.mark.parametrize("m,n,k", [(16, 4096, 4096), (300, 1536, 1024)], ids=lambda v: str(v))
def test_torch_cuda_graph_capture_and_replay(m, n, k):
    """Captured once (after a warm-up on the capture stream), replayed with new data."""
    import torch
    first, second = random_case(m, n, k, seed=51), random_case(m, n, k, seed=52)

    def as_torch(case):
        return (torch.from_dlpack(case.a).view(torch.float8_e4m3fn).clone(),
                torch.from_dlpack(case.b).view(torch.float8_e4m3fn).clone(),
                torch.from_dlpack(case.a_scale).clone(), torch.from_dlpack(case.b_scale).clone())

    bufs = as_torch(first)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fp8gemm.matmul(*bufs)                     # compile, plan, split-K workspace
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = fp8gemm.matmul(*bufs)
    graph.replay()
    torch.cuda.synchronize()
    check(out, first)
    for dst, src in zip(bufs, as_torch(second)):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    check(out, second)


# a_scale layouts and the As source each gets (dispatch/general.py: scale_source; the aligned
# K-major As gets windows instead of loads on the tiles of windows_win where they fit, and the
# loads of short units go in block on the tiles of loads_in_block_win)
SCALE_LAYOUTS = {"k-major": "loads", "k-major, 4-byte offset": "loads", "m-major": "slots",
                 "m-major, 4-byte offset": "loads"}


def _scales_in_layout(sa, layout):
    """a_scale [M, Kb] copied into a NaN-filled buffer in ``layout``: K-major or M-major, with a
    16-byte aligned base and stride, or at a 4-byte offset."""
    m, kb = sa.shape
    col0 = 1 if "offset" in layout else 4
    if layout.startswith("k-major"):
        return poisoned(sa, np.nan, pad_cols=(-kb) % 4 + 4, col0=col0)[0]
    return poisoned(sa.T, np.nan, pad_cols=(-m) % 4 + 4, col0=col0)[0].T


@pytest.mark.parametrize("cfg", [General(128, 5), General(64, 6), General(32, 8, 8, 1, 64), General(128, 4, 8, 3),
                                 General(16, 6, 8, 2, 64), General(32, 16, 8, 1, 64), General(128, 6)],
                         ids=lambda c: c.label())
@pytest.mark.parametrize("m,n,k,out_dtype", [(200, 300, 1040, "bfloat16"), (130, 1000, 7168, "float16"),
                                             (257, 136, 4096, "bfloat16"), (128, 256, 512, "bfloat16"),
                                             (64, 512, 256, "bfloat16")])
def test_scale_sources_agree_bitwise(m, n, k, out_dtype, cfg, monkeypatch):
    """The plain GEMM reads As from its stage slots (filled by TMA from an M-major As) or from
    global memory, depending on the layout, and Bs from global memory; or both from slots the
    producer warp copies them into from any layout (kScaleCopy, forced here where the slots fit);
    or both by TMA in windows of 32 K blocks (kScaleWindow, forced where they fit); or the loads
    each in its own block's half of the loop (kScaleLoadsInBlock, forced at every K). Every source
    gives the same bits, none reads the NaN border around As or Bs, and every one passes the
    accuracy check."""
    import cupy
    from fp8gemm import tma
    from fp8gemm.dispatch import general as g
    case = random_case(m, n, k, seed=21)
    if not cfg.is_valid(GemmDesc(m, n, k, out_dtype)):
        pytest.skip(f"{cfg.label()} does not take {m} x {n} x {k}")
    fits = {mask: cfg.smem_bytes(out_dtype, mask) <= g.MAX_SMEM_PER_BLOCK
            for mask in (g.SCALE_SLOTS_A, g.SCALE_COPIED, g.SCALE_WINDOW)}
    windows = fits[g.SCALE_WINDOW] and g.windows_win(cfg, k) and out_dtype != "float32"   # the aligned K-major As
    results = {}
    for layout, want in SCALE_LAYOUTS.items():
        sa = _scales_in_layout(case.a_scale, layout)
        # Bs K-major inside a NaN border, its row stride a multiple of 16 bytes
        kb = -(-k // 128)
        sb = poisoned(case.b_scale, np.nan, pad_cols=(-kb) % 4 + 4, col0=4)[0]
        stub = types.SimpleNamespace(out_dtype=out_dtype, sa_ptr=sa.data.ptr, k=k, m=m, n=n,
                                     sa_stride_m=sa.strides[0] // 4, sa_stride_k=sa.strides[1] // 4,
                                     sb_ptr=sb.data.ptr, sb_stride_n=sb.strides[0] // 4, sb_stride_k=1)
        loads = g.SCALE_LOADS_IN_BLOCK if g.loads_in_block_win(cfg, k) and out_dtype != "float32" else g.SCALE_LOADS
        expect = g.SCALE_SLOTS_A if want == "slots" and m >= cfg.block_m and fits[g.SCALE_SLOTS_A] else \
            g.SCALE_WINDOW if layout == "k-major" and windows else loads
        assert g.scale_source(stub, cfg)[0] == expect, (layout, sa.strides)
        out = fp8gemm.matmul(case.a, case.b, sa, sb, out_dtype=out_dtype, config=cfg)
        check(out, case, out_dtype)
        results[layout] = cupy.asarray(out).view(cupy.uint16)
    # Bs at a 4-byte offset
    sb_offset = poisoned(case.b_scale, np.nan, pad_cols=4, col0=1)[0]
    sa_k = _scales_in_layout(case.a_scale, "k-major")
    out = fp8gemm.matmul(case.a, case.b, sa_k, sb_offset, out_dtype=out_dtype, config=cfg)
    results["Bs at an offset"] = cupy.asarray(out).view(cupy.uint16)
    # both copied into the slots by the producer warp, forced: As K-major and M-major at a 4-byte
    # offset, Bs at a 4-byte offset
    if fits[g.SCALE_COPIED] and out_dtype != "float32":
        source = g.scale_source
        monkeypatch.setattr(g, "scale_source", lambda p, c: (g.SCALE_COPIED,) + source(p, c)[1:])
        from fp8gemm import plans
        plans.PLANS.clear()                           # no plan of the calls above
        try:
            for layout in ("k-major, 4-byte offset", "m-major, 4-byte offset"):
                sa_c = _scales_in_layout(case.a_scale, layout)
                out = fp8gemm.matmul(case.a, case.b, sa_c, sb_offset, out_dtype=out_dtype, config=cfg)
                check(out, case, out_dtype)
                results[f"copied, {layout}"] = cupy.asarray(out).view(cupy.uint16)
        finally:
            plans.PLANS.clear()                       # nor of these, for the tests after
    # both read by TMA in windows of 32 K blocks, forced: As and Bs K-major, 16-byte aligned
    if cfg.smem_bytes(out_dtype, g.SCALE_WINDOW) <= g.MAX_SMEM_PER_BLOCK and out_dtype != "float32":
        results["windows"] = _windowed(case, cfg, out_dtype, sa_k, sb)
    # the loads in block, forced at every K: As K-major and at a 4-byte offset
    if out_dtype != "float32":
        for layout in ("k-major", "k-major, 4-byte offset"):
            results[f"in-block loads, {layout}"] = _forced_source(
                case, cfg, out_dtype, _scales_in_layout(case.a_scale, layout), sb_offset,
                lambda p, c: (g.SCALE_LOADS_IN_BLOCK, tma.ZERO_DESCRIPTOR, tma.ZERO_DESCRIPTOR))
    base = results["k-major"]
    for layout, got in results.items():
        assert bool((got == base).all()), f"{layout} differs from the K-major result"


def _forced_source(case, cfg, out_dtype, sa, sb, source):
    """The GEMM with scale_source replaced by ``source``, checked against the float64 reference;
    its bits as uint16."""
    import cupy
    from fp8gemm import plans
    from fp8gemm.dispatch import general as g
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(g, "scale_source", source)
        plans.PLANS.clear()
        try:
            out = fp8gemm.matmul(case.a, case.b, sa, sb, out_dtype=out_dtype, config=cfg)
            check(out, case, out_dtype)
            return cupy.asarray(out).view(cupy.uint16)
        finally:
            plans.PLANS.clear()


def _windowed(case, cfg, out_dtype, sa, sb):
    """The GEMM with As and Bs read in windows of 32 K blocks (SCALE_WINDOW, forced), checked
    against the float64 reference; its bits as uint16."""
    from fp8gemm.dispatch import general as g
    assert g.k_major_windows_fit(types.SimpleNamespace(sa_ptr=sa.data.ptr, sb_ptr=sb.data.ptr, k=128 * sa.shape[1],
                                                       sa_stride_m=sa.strides[0] // 4, sa_stride_k=sa.strides[1] // 4,
                                                       sb_stride_n=sb.strides[0] // 4, sb_stride_k=sb.strides[1] // 4))
    return _forced_source(case, cfg, out_dtype, sa, sb,
                          lambda p, c: (g.SCALE_WINDOW,) + g.window_maps(p, c.block_m))


@pytest.mark.parametrize("m,n,k,cfg", [(1000, 4096, 1040, General(64, 6)),            # ~4 units a CTA
                                       (777, 2048, 12288 + 16, General(128, 5)),      # 97 blocks: 4 windows
                                       (300, 1024, 7168, General(64, 6, 8, 4)),       # splits from mid-window
                                       (100, 4096, 4096, General(32, 16, 8, 1, 64)),
                                       (65, 8192, 8192, General(64, 12, 8, 2, 64))],
                         ids=lambda v: v.label() if hasattr(v, "label") else str(v))
def test_scale_windows(m, n, k, cfg):
    """The scale windows (SCALE_WINDOW, forced) where a CTA runs many units, a unit many
    windows, and K splits start inside a window: the loads' bits, no NaN of the borders read."""
    import cupy
    case = random_case(m, n, k, seed=22)
    kb = -(-k // 128)
    sa = poisoned(case.a_scale, np.nan, pad_cols=(-kb) % 4 + 4, col0=4)[0]
    sb = poisoned(case.b_scale, np.nan, pad_cols=(-kb) % 4 + 4, col0=4)[0]
    base = cupy.asarray(fp8gemm.matmul(case.a, case.b, sa, sb, config=cfg)).view(cupy.uint16)
    got = _windowed(case, cfg, "bfloat16", sa, sb)
    assert bool((got == base).all()), "the windows' result differs from the loads'"


# The chunked K loop (kChunk, dispatch/general.py: chunk_blocks): K blocks per unit, ring
# positions of both kinds (stages a multiple of the chunk: chunks start at 0 or a multiple; the
# chunk a multiple of the stages: the stage index wraps inside a chunk), one and several chunks per
# unit and units per CTA, split K, a tail split, M and N tails, and 4-block chunks.
CHUNK_CASES = [((200, 300, 1024), General(64, 4), 8),                    # 8 blocks, s4: wraps twice
               ((300, 1000, 4096), General(128, 4), 8),                  # 4 chunks a unit
               ((130, 1000, 4096), General(32, 16, 8, 1, 64), 8),        # s16: chunks at 0 and 8
               ((100, 4096, 4096), General(32, 8, 8, 4, 64), 8),         # 4 splits of 8 blocks
               ((257, 520, 2048), General(64, 8, 8, 2, 64), 8),          # 2 splits, 64 x 64
               ((1200, 2048, 3072), General(128, 4, 8, 0), 8),           # tail split: 24 and 3 x 8
               ((1000, 4096, 1024), General(128, 4, 8), 4),              # 4-block chunks
               ((64, 512, 512), General(32, 4, 8, 1, 64), 4)]            # one 4-block chunk


@pytest.mark.parametrize("shape,cfg,chunk", CHUNK_CASES, ids=lambda v: v.label() if hasattr(v, "label") else str(v))
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16"])
def test_chunked_k_loop(shape, cfg, chunk, out_dtype, monkeypatch):
    """The chunked K loop, forced (the dispatcher takes it on fewer of these: 128-row tiles with
    units of one chunk): the bits of the rolled loops' result, within the reference bound, with As
    and Bs inside NaN borders (a scale loaded past a unit's last block would show), As also at a
    4-byte offset."""
    import cupy
    from fp8gemm import plans
    from fp8gemm.dispatch import general as g
    m, n, k = shape
    case = random_case(m, n, k, seed=m + n + k // 128)
    kb = -(-k // 128)
    sb = poisoned(case.b_scale, np.nan, pad_cols=(-kb) % 4 + 4, col0=4)[0]
    assert g.chunk_fits(cfg, chunk) and all(u > 0 and u % chunk == 0 for u in g.unit_blocks(cfg, m, n, k, 132))
    monkeypatch.setattr(g, "chunk_blocks", lambda *args: chunk)
    for layout in ("k-major", "k-major, 4-byte offset"):
        sa = _scales_in_layout(case.a_scale, layout)
        plans.PLANS.clear()
        out = fp8gemm.matmul(case.a, case.b, sa, sb, out_dtype=out_dtype, config=cfg)
        check(out, case, out_dtype)
        got = cupy.asarray(out).view(cupy.uint16)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(g, "chunk_blocks", lambda *args: 0)
            plans.PLANS.clear()
            try:
                rolled = cupy.asarray(fp8gemm.matmul(case.a, case.b, sa, sb, out_dtype=out_dtype,
                                                     config=cfg)).view(cupy.uint16)
            finally:
                plans.PLANS.clear()
        assert bool((got == rolled).all()), f"{layout}: the chunked loop differs from the rolled loops"


# TAIL_SPLIT (scheduler.cuh kTailSplit): whole waves unsplit, the last wave's tiles split as the
# grid fills, each split >= 8 K blocks. Shapes by tile count on 132 SMs: 192 (1.45 waves: halves),
# 150 (the rest in halves: K caps it), 200 (68 left over: more than half a wave, so nothing
# splits), 60 (under a wave, K too short to split), with K tails.
TAIL_CASES = [((6 * 128, 4096, 4096 + 16), General(128, 4, 8, 0)),       # 192 tiles of 128 x 128
              ((300, 6400, 2048), General(128, 4, 8, 0)),                # 3 x 50 = 150 tiles
              ((200, 6400, 1040), General(64, 6, 8, 0)),                 # 2 x 100 = 200
              ((130, 1920, 512), General(64, 6, 8, 0)),                  # 2 x 30 = 60, 4 K blocks
              ((130, 1920, 2048 + 16), General(64, 6, 8, 0)),            # 60 tiles in halves
              ((5, 24576, 4096), SwapAB(8, 6, 1, 0)),                    # 192 weight tiles, 5 tokens
              ((40, 18000, 1536 + 32), SwapAB(32, 6, 1, 0))]             # 141 x 2: 18 left, 6 ways (K / 2)


@pytest.mark.parametrize("shape,cfg", TAIL_CASES, ids=lambda v: v.label() if hasattr(v, "label") else str(v))
def test_tail_split(shape, cfg):
    """The last wave's tiles split over the grid: within the reference bound for every output
    type (FP32 through its fine promotion), bitwise reproducible, inside NaN-poisoned buffers."""
    import cupy
    m, n, k = shape
    case = random_case(m, n, k, seed=m + n // 7 + k)
    for out_dtype in ("bfloat16", "float32"):
        first = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype, config=cfg)
        check(first, case, out_dtype)
        again = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype, config=cfg)
        assert bool((cupy.asarray(again).view(cupy.uint8) == cupy.asarray(first).view(cupy.uint8)).all())
    check_poisoned(case, 24, "bfloat16", cfg)
