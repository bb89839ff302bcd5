"""GPU tests of the three-consumer-warpgroup kernel (sm90_fp8_gemm_wg3) forced
on M, N and K tails (192-row tiles, a warpgroup wholly past M), bf16 and fp16 out, TMA and direct
stores: against the float64 reference, bit-exact on dyadic inputs, inside NaN-poisoned buffers."""
import pytest

from generators import random_case
from test_matmul_general import check, check_bit_exact, check_poisoned

import fp8gemm
from fp8gemm.dispatch import Wg3

pytestmark = pytest.mark.gpu

V = "sm90_fp8_gemm_wg3"
# M: inside the first warpgroup, past 2 of 3 warpgroups, one whole tile, a tail tile; N and K tails.
SHAPES = [(1, 128, 128), (130, 136, 400), (192, 256, 1024), (500, 300, 1040), (4100, 4096, 4096)]
CONFIGS = [(128, 4, 8), (128, 3, 1), (128, 3, 8), (64, 6, 8)]      # (block_n, stages, raster group)


def forced(block_n=128, stages=3, group_m=8):
    return Wg3(block_n, stages, group_m)


@pytest.mark.parametrize("block_n,stages,group_m", CONFIGS, ids=str)
@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
def test_forced_bf16(m, n, k, block_n, stages, group_m):
    case = random_case(m, n, k, seed=m + n + k)
    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=forced(block_n, stages, group_m))
    check(out, case)


@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
def test_forced_fp16(m, n, k):
    case = random_case(m, n, k, seed=2 * m + n + k)
    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype="float16", config=forced())
    check(out, case, "float16")


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("m,n,k", [(1, 128, 16), (200, 300, 1040)], ids=str)
def test_exact_dyadic(m, n, k, out_dtype):
    case = random_case(m, n, k, seed=17, dyadic=True)
    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=out_dtype, config=forced())
    check_bit_exact(out, case, out_dtype)


@pytest.mark.parametrize("m,n,k,pad", [(1, 1, 16, 24), (200, 300, 1040, 24), (200, 300, 1040, 20),
                                       (130, 1000, 256, 24)], ids=str)
def test_nan_poisoned_borders(m, n, k, pad):
    check_poisoned(random_case(m, n, k, seed=5), pad, "bfloat16", forced())


def test_fp32_output_refused():
    case = random_case(64, 128, 256, seed=1)
    with pytest.raises(ValueError, match="not valid"):
        fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype="float32", config=forced())


@pytest.mark.parametrize("m,n,k", [(4100, 576, 7040), (3000, 1000, 1408)], ids=str)
def test_dispatcher_picks_wg3(m, n, k):
    """Untuned shapes where the fallback's estimate takes the three-warpgroup kernel (K / 128 not a
    multiple of 4: the dense model declines; tests/test_matmul_dense.py has its own)."""
    from fp8gemm.dispatch import select
    assert select(m, n, k).variant == V, select(m, n, k)
    case = random_case(m, n, k, seed=m + k)
    check(fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale), case)


# ---- grouped mode (the dispatcher's window forced open) -----------------------------------------

@pytest.fixture
def wg3_grouped(monkeypatch):
    from fp8gemm import plans
    from fp8gemm.dispatch import grouped
    monkeypatch.setattr(grouped, "WG3_ROWS", (0, 1 << 30))
    plans.PLANS.clear()
    yield
    plans.PLANS.clear()


GROUP_SIZES = [0, 1, 63, 64, 65, 127, 128, 129, 191, 192, 193, 300, 385, 0]


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("n,k", [(256, 512), (300, 400), (40, 256)], ids=str)
def test_grouped_contiguous(wg3_grouped, n, k, out_dtype):
    from test_grouped_gpu import check_rows, contiguous_case, reference_contiguous

    from fp8gemm.dispatch import grouped
    from generators import to_cupy_f64
    a, sa, b, sb, offsets = contiguous_case(GROUP_SIZES, n, k, seed=n + k)
    assert grouped.candidate(n, k, out_dtype, len(GROUP_SIZES), 150.0).variant == V
    out = fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, out_dtype=out_dtype)
    check_rows(to_cupy_f64(out), reference_contiguous(a, sa, b, sb, offsets), out_dtype)


def test_grouped_equals_general_grouped(monkeypatch):
    """Bit for bit the general kernel's grouped mode (same per-block FP32 promotions, same order)."""
    from test_grouped_gpu import contiguous_case

    from fp8gemm import plans
    from fp8gemm.dispatch import grouped
    a, sa, b, sb, offsets = contiguous_case(GROUP_SIZES, 512, 2048, seed=3)
    monkeypatch.setattr(grouped, "WG3_ROWS", None)
    plans.PLANS.clear()
    ref = fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, out_dtype="float16")
    monkeypatch.setattr(grouped, "WG3_ROWS", (0, 1 << 30))
    plans.PLANS.clear()
    got = fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, out_dtype="float16")
    plans.PLANS.clear()
    p = int(offsets[-1])
    assert bool((got[:p].view("uint16") == ref[:p].view("uint16")).all()), "differs from the general kernel"


def test_grouped_masked_poisoned(wg3_grouped):
    import cupy
    from test_grouped_gpu import check_rows, masked_case

    from fp8gemm import moe_reference
    counts, max_rows, n, k = [0, 1, 64, 130, 192, 200, 7], 200, 300, 400
    a, sa, b, sb = masked_case(counts, max_rows, n, k, seed=n)
    out = cupy.full((len(counts), max_rows, n), cupy.nan, dtype=cupy.float16)
    res = fp8gemm.grouped_matmul_masked(a, b, sa, sb, cupy.asarray(counts, dtype=cupy.int32), out=out,
                                        expected_rows=sum(counts))
    assert res is out
    got = out.astype(cupy.float64)
    want = cupy.asarray(moe_reference.grouped_matmul_masked(a.get(), sa.get(), b.get(), sb.get(), counts))
    valid = cupy.zeros(got.shape[:2], dtype=bool)
    for e, c in enumerate(counts):
        valid[e, :c] = True
    check_rows(got[valid], want[valid], "float16")
    assert bool(cupy.isnan(got[~valid]).all()), "a padding row was written"


@pytest.mark.parametrize("block_n,stages,group_m", [(128, 3, 8), (128, 4, 1), (64, 6, 8)], ids=str)
@pytest.mark.parametrize("m,n,k", [(500, 300, 1040), (192, 256, 4096), (4100, 1000, 1536)], ids=str)
def test_as_slots_agree_bitwise(m, n, k, block_n, stages, group_m):
    """An M-major As with a 16-byte aligned base and column stride goes into the stage slots by TMA
    (Wg3.as_slots), other layouts are loaded; all give the same bits, the slots read nothing of
    the NaN border around As (rows past M are past the map), and each passes the accuracy check."""
    import types

    import cupy
    from test_matmul_general import SCALE_LAYOUTS, _scales_in_layout
    case = random_case(m, n, k, seed=23)
    cfg = forced(block_n, stages, group_m)
    results = {}
    for layout, want in SCALE_LAYOUTS.items():
        sa = _scales_in_layout(case.a_scale, layout)
        stub = types.SimpleNamespace(out_dtype="bfloat16", sa_ptr=sa.data.ptr, m=m, sa_stride_m=sa.strides[0] // 4,
                                     sa_stride_k=sa.strides[1] // 4)
        assert cfg.as_slots(stub) == (want == "slots" and cfg.smem_bytes("bfloat16", True) <= 232448), layout
        out = fp8gemm.matmul(case.a, case.b, sa, case.b_scale, config=cfg)
        check(out, case)
        results[layout] = cupy.asarray(out).view(cupy.uint16)
    base = results["k-major"]
    for layout, got in results.items():
        assert bool((got == base).all()), f"{layout} differs from the K-major result"
