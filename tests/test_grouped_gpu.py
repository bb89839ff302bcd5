"""GPU tests of the grouped GEMM (MoE; the general kernel's grouped mode) in both layouts: against
the float64 reference of fp8gemm.moe_reference, bit for bit against one plain matmul per group,
with empty groups, one group taking every row, group ends inside a warpgroup's 64 rows, N and K
tails, NaN-poisoned rows outside the groups, device counts changed between CUDA-graph replays,
and out-of-range device counts (clamped, no fault)."""
import numpy as np
import pytest

from generators import FP8_NAN, random_case, to_cupy_f64
from test_matmul_general import CALC_DIFF_TOL, TOL

import fp8gemm
from fp8gemm import moe_reference, reference
from fp8gemm.dispatch import General, SwapAB, dense
from fp8gemm.dispatch.general import TAIL_SPLIT

pytestmark = pytest.mark.gpu


def weights(groups, n, k, seed):
    """b [G, N, K] bytes and b_scale [G, ceil(N/128), ceil(K/128)], each group its own random
    matrix with scales at the |C| ~ 1 level."""
    import cupy
    cases = [random_case(1, n, k, seed=seed + 101 * g) for g in range(groups)]
    return cupy.stack([c.b for c in cases]), cupy.stack([c.b_scale for c in cases])


def check_rows(got, want, out_dtype):
    """Relative Frobenius error and calc_diff of float64 cupy rows against the reference rows."""
    import cupy
    assert bool(cupy.isfinite(got).all()), "non-finite values in the groups' rows"
    assert float(cupy.abs(want).max()) > 0, "degenerate case: all-zero reference"
    err = reference.rel_fro_error(got, want)
    assert err <= TOL[out_dtype], f"relative Frobenius error {err:.3e} > {TOL[out_dtype]}"
    diff = reference.calc_diff(got, want)
    assert diff <= CALC_DIFF_TOL, f"calc_diff {diff:.3e} > {CALC_DIFF_TOL}"


def contiguous_case(sizes, n, k, seed):
    import cupy
    p = sum(sizes)
    act = random_case(max(p, 1), 8, k, seed=seed)
    b, sb = weights(len(sizes), n, k, seed)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    return act.a[:p], act.a_scale[:p], b, sb, cupy.asarray(offsets)


def reference_contiguous(a, sa, b, sb, offsets):
    import cupy
    return cupy.asarray(moe_reference.grouped_matmul_contiguous(a.get(), sa.get(), b.get(), sb.get(), offsets.get()))


# Group sizes: empty groups, 1 row, ends just before / at / after a 64-row warpgroup and a 128-row
# tile, one group with every row, a single group.
SIZES = {"tails": [0, 1, 63, 64, 65, 127, 128, 129, 300, 0],
         "even": [256, 256, 256],
         "one_takes_all": [0, 0, 500, 0],
         "single": [77]}


@pytest.mark.parametrize("sizes", SIZES, ids=str)
@pytest.mark.parametrize("n,k", [(256, 512), (300, 400), (40, 256), (512, 2048)], ids=str)
def test_contiguous_bf16(sizes, n, k):
    a, sa, b, sb, offsets = contiguous_case(SIZES[sizes], n, k, seed=n + k)
    out = fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets)
    assert out.shape == (a.shape[0], n) and out.dtype.name == "bfloat16"
    check_rows(to_cupy_f64(out), reference_contiguous(a, sa, b, sb, offsets), "bfloat16")


@pytest.mark.parametrize("out_dtype", ["float16", "float32"])
@pytest.mark.parametrize("n,k", [(256, 512), (300, 400)], ids=str)
def test_contiguous_out_dtypes(n, k, out_dtype):
    a, sa, b, sb, offsets = contiguous_case(SIZES["tails"], n, k, seed=7)
    out = fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, out_dtype=out_dtype)
    check_rows(to_cupy_f64(out), reference_contiguous(a, sa, b, sb, offsets), out_dtype)


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_contiguous_equals_matmul_per_group(out_dtype):
    """Each group's rows equal, bit for bit, fp8gemm.matmul of those rows with the group's
    weights on the same tile (the grouped mode changes which rows a tile holds, not the sums)."""
    import cupy
    sizes = SIZES["tails"]
    a, sa, b, sb, offsets = contiguous_case(sizes, 256, 1024, seed=3)
    got = fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, out_dtype=out_dtype)
    config = General(block_n=128, stages=4, group_m=8)
    off = offsets.get()
    for g in range(len(sizes)):
        lo, hi = int(off[g]), int(off[g + 1])
        if hi == lo:
            continue
        want = fp8gemm.matmul(a[lo:hi], b[g], sa[lo:hi], sb[g], out_dtype=out_dtype, config=config)
        assert bool((got[lo:hi].view(cupy.uint8) == want.view(cupy.uint8)).all()), f"group {g} differs"


def test_contiguous_rows_outside_groups_untouched():
    """Rows before offsets[0] and from offsets[G] on are neither read (NaN there stays out of the
    result) nor written (NaN in out= stays)."""
    import cupy
    act = random_case(10 + 200 + 12, 8, 512, seed=11)
    a, sa = act.a.copy(), act.a_scale.copy()
    b, sb = weights(3, 256, 512, seed=11)
    a[:10] = FP8_NAN
    a[-12:] = FP8_NAN
    sa[:10] = cupy.nan
    sa[-12:] = cupy.nan
    offsets = cupy.asarray([10, 140, 140, 210], dtype=cupy.int32)   # groups of 130, 0, 70 rows
    out = cupy.full((a.shape[0], 256), cupy.nan, dtype=cupy.float32)
    assert fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, out=out) is out
    inner = slice(10, a.shape[0] - 12)
    want = cupy.asarray(moe_reference.grouped_matmul_contiguous(
        a[inner].get(), sa[inner].get(), b.get(), sb.get(), (offsets - 10).get()))
    check_rows(out[inner].astype(cupy.float64), want, "float32")
    assert bool(cupy.isnan(out[:10]).all() and cupy.isnan(out[-12:]).all()), "a write landed outside the groups"


def masked_case(counts, max_rows, n, k, seed):
    """a [G, max_rows, K] with every row at and past counts[g] poisoned (FP8 NaN, NaN scale)."""
    import cupy
    g = len(counts)
    act = random_case(g * max_rows, 8, k, seed=seed)
    a = act.a.reshape(g, max_rows, k).copy()
    sa = act.a_scale.reshape(g, max_rows, -1).copy()
    for e, c in enumerate(counts):
        a[e, c:] = FP8_NAN
        sa[e, c:] = cupy.nan
    b, sb = weights(g, n, k, seed)
    return a, sa, b, sb


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("n,k", [(256, 512), (300, 400)], ids=str)
def test_masked_poisoned_padding(n, k, out_dtype):
    """Rows past each group's count are NaN in A and its scales, and NaN in out=: the groups'
    rows (on 64-wide tiles, from the expected_rows hint) match the reference and the padding rows stay NaN (never read into a result, never
    written)."""
    import cupy
    counts, max_rows = [0, 1, 64, 130, 200, 7], 200
    a, sa, b, sb = masked_case(counts, max_rows, n, k, seed=n)
    if out_dtype == "bfloat16":
        import torch
        out = torch.full((len(counts), max_rows, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    else:
        out = cupy.full((len(counts), max_rows, n), cupy.nan, dtype=cupy.float32)
    dev_counts = cupy.asarray(counts, dtype=cupy.int32)
    # The hint makes these few tiles 64 wide (dispatch/grouped.py: candidate); results agree.
    res = fp8gemm.grouped_matmul_masked(a, b, sa, sb, dev_counts, out=out, expected_rows=sum(counts))
    assert res is out
    got = to_cupy_f64(out)
    want = cupy.asarray(moe_reference.grouped_matmul_masked(a.get(), sa.get(), b.get(), sb.get(), counts))
    valid = cupy.zeros(got.shape[:2], dtype=bool)
    for e, c in enumerate(counts):
        valid[e, :c] = True
    check_rows(got[valid], want[valid], out_dtype)
    assert bool(cupy.isnan(got[~valid]).all()), "a padding row was written"


def captured(call):
    """(graph, stream): ``call`` captured on a fresh CuPy stream (its first call happens inside)."""
    import cupy
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        call()
        graph = stream.end_capture()
    return graph, stream


def test_masked_graph_replays_with_new_device_counts():
    """A CuPy stream capture of the masked GEMM replays with the counts the device buffer holds
    at replay time (the kernel reads them; nothing was baked in at capture)."""
    import cupy
    max_rows, n, k = 96, 256, 512
    a, sa, b, sb = masked_case([max_rows] * 4, max_rows, n, k, seed=5)
    counts = cupy.zeros(4, dtype=cupy.int32)
    out = cupy.empty((4, max_rows, n), dtype=cupy.float32)
    graph, stream = captured(lambda: fp8gemm.grouped_matmul_masked(a, b, sa, sb, counts, out=out))
    full = cupy.asarray(moe_reference.grouped_matmul_masked(a.get(), sa.get(), b.get(), sb.get(), [max_rows] * 4))
    for new in ([3, 0, 96, 50], [96, 96, 1, 0]):
        out[...] = cupy.nan
        counts[...] = cupy.asarray(new, dtype=cupy.int32)
        cupy.cuda.Device().synchronize()
        graph.launch(stream)
        stream.synchronize()
        for e, c in enumerate(new):
            if c:
                check_rows(out[e, :c].astype(cupy.float64), full[e, :c], "float32")
            assert bool(cupy.isnan(out[e, c:]).all()), f"group {e}: rows past count {c} written"


def test_masked_out_of_range_device_counts_are_clamped():
    """Device counts are not checked (no host sync): negative ones act as 0, ones past max_rows as
    max_rows. Wrong input, but no fault and nothing outside the arrays touched."""
    import cupy
    max_rows, n, k = 64, 128, 256
    a, sa, b, sb = masked_case([max_rows] * 3, max_rows, n, k, seed=9)
    out = cupy.full((3, max_rows, n), cupy.nan, dtype=cupy.float32)
    fp8gemm.grouped_matmul_masked(a, b, sa, sb, cupy.asarray([-5, 10**6, 3], dtype=cupy.int32), out=out)
    full = cupy.asarray(moe_reference.grouped_matmul_masked(a.get(), sa.get(), b.get(), sb.get(), [0, 64, 3]))
    assert bool(cupy.isnan(out[0]).all()) and bool(cupy.isnan(out[2, 3:]).all())
    check_rows(out[1].astype(cupy.float64), full[1], "float32")
    check_rows(out[2, :3].astype(cupy.float64), full[2, :3], "float32")


def test_torch_caller_and_host_offsets():
    """torch float8 inputs, offsets as a host list: a torch result on the current stream."""
    import torch
    sizes = [40, 0, 200]
    a, sa, b, sb, offsets = contiguous_case(sizes, 384, 512, seed=21)
    fp8 = torch.float8_e4m3fn
    out = fp8gemm.grouped_matmul_contiguous(torch.from_dlpack(a).view(fp8), torch.from_dlpack(b).view(fp8),
                                            torch.from_dlpack(sa), torch.from_dlpack(sb), [0, 40, 40, 240])
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and out.shape == (240, 384)
    check_rows(to_cupy_f64(out), reference_contiguous(a, sa, b, sb, offsets), "bfloat16")
    with pytest.raises(ValueError, match="offsets must be nondecreasing"):
        fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, [0, 50, 40, 240])
    with pytest.raises(ValueError, match=r"counts must lie in 0\.\.max_rows"):
        m = masked_case([2, 2, 2], 8, 384, 512, seed=1)
        fp8gemm.grouped_matmul_masked(m[0], b, m[1], sb, [0, 9, 1])


def test_empty_groups_launch_nothing():
    """Every count zero: nothing written; zero rows: an empty result."""
    import cupy
    a, sa, b, sb = masked_case([0, 0], 32, 128, 256, seed=2)
    out = cupy.full((2, 32, 128), cupy.nan, dtype=cupy.float32)
    fp8gemm.grouped_matmul_masked(a, b, sa, sb, cupy.zeros(2, dtype=cupy.int32), out=out)
    assert bool(cupy.isnan(out).all())
    a, sa, b, sb, offsets = contiguous_case([0, 0, 0], 128, 256, seed=2)
    res = fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets)
    assert res.shape == (0, 128)


# ---- decode: the swap-AB grouped mode (few rows per group), with and without K splits ------------

def grouped_choice(n, k, out_dtype, groups, rows_per_group, active):
    from fp8gemm.dispatch import grouped
    return grouped.candidate(n, k, out_dtype, groups, rows_per_group, active)


DECODE = {"mixed": [1, 2, 0, 5, 9, 17, 3, 0, 33], "ones": [1] * 6}


@pytest.mark.parametrize("sizes", DECODE, ids=str)
@pytest.mark.parametrize("n,k,out_dtype", [(256, 1024, "bfloat16"), (300, 400, "float32"), (4096, 2048, "bfloat16")],
                         ids=str)
def test_contiguous_decode_swap(sizes, n, k, out_dtype):
    """Few rows per group take swap-AB (token tiles of 8-32, several per group at 33 rows); the
    result matches the reference and, bit for bit, one swap-AB matmul per group on the same tile
    and K splits."""
    import cupy
    rows = DECODE[sizes]
    p, nonempty = sum(rows), sum(1 for r in rows if r)
    cand = grouped_choice(n, k, out_dtype, len(rows), 2.0 * p / min(len(rows), p), min(len(rows), p))
    assert isinstance(cand, SwapAB), cand
    a, sa, b, sb, offsets = contiguous_case(rows, n, k, seed=n + k + p)
    got = fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, out_dtype=out_dtype)
    check_rows(to_cupy_f64(got), reference_contiguous(a, sa, b, sb, offsets), out_dtype)
    if cand.splits == TAIL_SPLIT:
        # the last wave's split depends on every group's tiles: no per-group matmul has the same
        # partition, so the result is checked for run-to-run equality instead
        again = fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, out_dtype=out_dtype)
        assert bool((again.view(cupy.uint8) == got.view(cupy.uint8)).all())
        return
    config = SwapAB(block_n=cand.block_n, stages=4, group_m=1, splits=cand.splits)
    off = offsets.get()
    for g in range(len(rows)):
        lo, hi = int(off[g]), int(off[g + 1])
        if hi > lo:
            want = fp8gemm.matmul(a[lo:hi], b[g], sa[lo:hi], sb[g], out_dtype=out_dtype, config=config)
            assert bool((got[lo:hi].view(cupy.uint8) == want.view(cupy.uint8)).all()), f"group {g} differs"
    assert nonempty >= 6


@pytest.mark.parametrize("n,k", [(256, 1024), (300, 2064), (4096, 4096)], ids=str)
def test_masked_decode_swap_split_k_poisoned(n, k):
    """Decode buffers (max_rows 8): swap-AB with K splits; padding rows NaN in A, its scales and
    out= stay out of the result and unwritten."""
    import cupy
    counts, max_rows = [1, 0, 3, 8, 0, 2], 8
    cand = grouped_choice(n, k, "float32", len(counts), max_rows, len(counts))
    assert isinstance(cand, SwapAB) and cand.block_n == 8, cand
    a, sa, b, sb = masked_case(counts, max_rows, n, k, seed=k)
    out = cupy.full((len(counts), max_rows, n), cupy.nan, dtype=cupy.float32)
    fp8gemm.grouped_matmul_masked(a, b, sa, sb, cupy.asarray(counts, dtype=cupy.int32), out=out)
    want = cupy.asarray(moe_reference.grouped_matmul_masked(a.get(), sa.get(), b.get(), sb.get(), counts))
    valid = cupy.zeros(out.shape[:2], dtype=bool)
    for e, c in enumerate(counts):
        valid[e, :c] = True
    check_rows(out[valid].astype(cupy.float64), want[valid], "float32")
    assert bool(cupy.isnan(out[~valid]).all()), "a padding row was written"


def masked_from_contiguous(a, sa, offsets):
    """The contiguous case's rows as the masked layout: (a [G, rows, K], its scales, counts [G]),
    rows = max(128, the largest group), every row past a group's count FP8 NaN with NaN scales."""
    import cupy
    sizes = np.diff(offsets.get())
    rows = max(128, int(sizes.max()))
    am = cupy.full((len(sizes), rows, a.shape[1]), FP8_NAN, dtype=cupy.uint8)
    sam = cupy.full((len(sizes), rows, sa.shape[1]), np.nan, dtype=cupy.float32)
    for g, (lo, hi) in enumerate(zip(offsets.get()[:-1], offsets.get()[1:])):
        am[g, :hi - lo], sam[g, :hi - lo] = a[lo:hi], sa[lo:hi]
    return am, sam, cupy.asarray(sizes.astype(np.int32))


def test_masked_decode_graph_replays_and_expected_rows_hint():
    """Swap-AB with K splits captured in a CUDA graph (its split workspace is the captured one),
    replayed with new device counts; the expected_rows hint picks splits for 3 busy groups of 64."""
    import cupy
    max_rows, n, k = 16, 512, 2048
    a, sa, b, sb = masked_case([max_rows] * 64, max_rows, n, k, seed=8)
    counts = cupy.zeros(64, dtype=cupy.int32)
    out = cupy.empty((64, max_rows, n), dtype=cupy.float32)
    graph, stream = captured(lambda: fp8gemm.grouped_matmul_masked(a, b, sa, sb, counts, out=out, expected_rows=6))
    full = cupy.asarray(moe_reference.grouped_matmul_masked(a.get(), sa.get(), b.get(), sb.get(), [max_rows] * 64))
    for new in ([0] * 60 + [1, 16, 0, 5], [3] * 64):
        out[...] = cupy.nan
        counts[...] = cupy.asarray(new, dtype=cupy.int32)
        cupy.cuda.Device().synchronize()
        graph.launch(stream)
        stream.synchronize()
        got = to_cupy_f64(out)
        valid = cupy.zeros(out.shape[:2], dtype=bool)
        for e, c in enumerate(new):
            valid[e, :c] = True
        check_rows(got[valid], full[valid], "float32")
        assert bool(cupy.isnan(got[~valid]).all()), "rows past the counts written"


@pytest.mark.parametrize("config", [General(128, 4), SwapAB(32, 6, 1, 1), SwapAB(8, 6, 1, 2), "wg3"], ids=str)
@pytest.mark.parametrize("sizes", ["tails", "one_takes_all"], ids=str)
def test_forced_tiles_contiguous_and_masked(sizes, config):
    """grouped_matmul_*(config=): every grouped tile the dispatcher can pick, forced on the tail
    sizes in both layouts, within the reference bound (the masked layout inside NaN padding)."""
    import cupy
    from fp8gemm.dispatch import Wg3
    config = {"wg3": Wg3(128, 3, 8)}.get(config, config)
    group_sizes = SIZES[sizes]
    a, sa, b, sb, offsets = contiguous_case(group_sizes, 300, 1040, seed=31)
    out = fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, config=config)
    want = reference_contiguous(a, sa, b, sb, offsets)
    check_rows(to_cupy_f64(out), want, "bfloat16")
    am, sam, counts = masked_from_contiguous(a, sa, offsets)
    outm = fp8gemm.grouped_matmul_masked(am, b, sam, sb, counts, config=config)
    got = cupy.concatenate([to_cupy_f64(outm[g, :c]) for g, c in enumerate(group_sizes)])
    check_rows(got, want, "bfloat16")


def test_forced_tile_refused():
    a, sa, b, sb, offsets = contiguous_case([3, 4], 256, 512, seed=3)
    from fp8gemm.dispatch import ShortK, Wg3
    with pytest.raises(ValueError, match="General, SwapAB, Wg3 or Dense"):
        fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, config=ShortK(64, 64))
    with pytest.raises(ValueError, match="128-row tiles"):
        fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, config=General(64, 6, 8, 1, 64))
    with pytest.raises(ValueError, match="precise_fp32=False"):
        fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, out_dtype="float32", config=Wg3(128, 3, 8))


DENSE_K_MAJOR = pytest.mark.skipif(not dense.K_MAJOR_SWITCH, reason="the dense grouped mode reads As through the "
                                   "K-major window, which FP8GEMM_DENSE_K_MAJOR=0 turns off")


@DENSE_K_MAJOR
@pytest.mark.parametrize("config", ["128x128", "128x128 2acc", "64x64", "256x128 c2A", "128x96", "128x128 c2A",
                                    "128x128 c2B", "64x96 c2B"])
@pytest.mark.parametrize("sizes", ["tails", "one_takes_all", "even"], ids=str)
@pytest.mark.parametrize("n,out_dtype", [(300, "bfloat16"), (256, "float16")], ids=str)
def test_dense_grouped_contiguous_and_masked(sizes, config, n, out_dtype):
    """The dense kernel's grouped mode (forced): group ends inside a tile (direct stores there, TMA
    stores for whole tiles), empty groups, N tails, a straddling width, pairs sharing A, pairs
    sharing B (multicast where both row tiles are one group's, else not); NaN in
    out= outside the groups stays (contiguous: rows past offsets[G]; masked: every padding row)."""
    import cupy
    from fp8gemm.dispatch import Dense
    config = {"128x128": Dense(128, 128, 5, 1, 1, 8), "128x128 2acc": Dense(128, 128, 5, 1, 1, 8, 1),
              "64x64": Dense(64, 64, 8, 1, 1, 8), "256x128 c2A": Dense(256, 128, 3, 2, 1, 8),
              "128x96": Dense(128, 96, 6, 1, 1, 8), "128x128 c2A": Dense(128, 128, 5, 2, 1, 8),
              "128x128 c2B": Dense(128, 128, 5, 2, 0, 8), "64x96 c2B": Dense(64, 96, 8, 2, 0, 8)}[config]
    group_sizes = SIZES[sizes]
    a, sa, b, sb, offsets = contiguous_case(group_sizes, n, 1024, seed=37)
    p = a.shape[0]
    ab = cupy.concatenate([a, cupy.full((5, a.shape[1]), FP8_NAN, dtype=a.dtype)])
    sab = cupy.concatenate([sa, cupy.full((5, sa.shape[1]), cupy.nan, dtype=sa.dtype)])
    out = cupy.full((p + 5, n), cupy.nan, dtype=out_dtype)
    assert fp8gemm.grouped_matmul_contiguous(ab, b, sab, sb, offsets, out=out, config=config) is out
    want = reference_contiguous(a, sa, b, sb, offsets)
    check_rows(to_cupy_f64(out[:p]), want, out_dtype)
    assert bool(cupy.isnan(out[p:].astype(cupy.float32)).all()), "a row past offsets[G] was written"
    am, sam, counts = masked_from_contiguous(a, sa, offsets)
    outm = cupy.full((am.shape[0], am.shape[1], n), cupy.nan, dtype=out_dtype)
    fp8gemm.grouped_matmul_masked(am, b, sam, sb, counts, out=outm, config=config)
    got = cupy.concatenate([to_cupy_f64(outm[g, :c]) for g, c in enumerate(group_sizes)])
    check_rows(got, want, out_dtype)
    for g, c in enumerate(group_sizes):
        assert bool(cupy.isnan(outm[g, c:].astype(cupy.float32)).all()), f"group {g}: a padding row was written"


@DENSE_K_MAJOR
@pytest.mark.parametrize("config", ["128x128", "256x128 c2A"])
def test_dense_grouped_fp32_coarse(config):
    """FP32 out with precise_fp32=False (fp8gemm.moe's L1 intermediate): within the bf16 bound of
    the reference (promotion per K block, as the default tile's coarse mode); precise refused."""
    import cupy
    from fp8gemm.dispatch import Dense
    c = {"128x128": Dense(128, 128, 4, 1, 1, 8), "256x128 c2A": Dense(256, 128, 3, 2, 1, 8)}[config]
    a, sa, b, sb, offsets = contiguous_case(SIZES["tails"], 512, 2048, seed=43)
    out = fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, out_dtype="float32", precise_fp32=False, config=c)
    check_rows(to_cupy_f64(out), reference_contiguous(a, sa, b, sb, offsets), "bfloat16")
    with pytest.raises(ValueError, match="precise_fp32=False"):
        fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, out_dtype="float32", config=c)
    assert out.dtype == cupy.float32


def grouped_same_bits_under_switch(monkeypatch, c, switch, prelude, seed, k=2048, kernel_is=None):
    """A dense lab switch in the grouped mode against its off form: groups of 192 +- a few rows (a
    second 128-row tile of 64 rows or fewer), 1, 0, 64 and 65 rows, the last group's last tile past
    A's rows; contiguous and masked, bitwise the switch-off result, and the reference. The switch's
    kernel is the one whose compiler key (device, variant, template arguments, prelude) passes
    ``kernel_is`` (default: its prelude holds ``prelude``)."""
    import cupy
    from fp8gemm import compiler, plans
    kernel_is = kernel_is or (lambda key: prelude in key[3])
    group_sizes = [192, 180, 1, 0, 64, 65, 200, 129]
    a, sa, b, sb, offsets = contiguous_case(group_sizes, 384, k, seed=seed)
    am, sam, counts = masked_from_contiguous(a, sa, offsets)
    # Each form's calls start from an empty kernel table (loaded again from the disk cache), so
    # that what the table holds after them is what they ran, whichever tests ran before in this
    # process (with a switch on by default, the switch's kernel may already be here).
    monkeypatch.setattr(dense, switch, False)
    monkeypatch.setattr(compiler, "_kernels", {})
    plans.PLANS.clear()
    base = fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, config=c)
    base_m = fp8gemm.grouped_matmul_masked(am, b, sam, sb, counts, config=c)
    assert compiler._kernels and not any(kernel_is(key) for key in compiler._kernels), \
        "the switch-off calls ran the switch's kernel"
    monkeypatch.setattr(dense, switch, True)
    if prelude:
        assert prelude in c.prelude()
    # the grouped plan cache keys a forced config by config.key(), not its prelude: start afresh
    plans.PLANS.clear()
    monkeypatch.setattr(compiler, "_kernels", {})
    try:
        out = fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, config=c)
        assert any(kernel_is(key) for key in compiler._kernels), "the call did not run the switch's kernel"
        check_rows(to_cupy_f64(out), reference_contiguous(a, sa, b, sb, offsets), "bfloat16")
        assert bool((out.view(cupy.uint16) == base.view(cupy.uint16)).all()), "contiguous: other bits"
        outm = fp8gemm.grouped_matmul_masked(am, b, sam, sb, counts, config=c)
        for g, n_rows in enumerate(group_sizes):
            assert bool((outm[g, :n_rows].view(cupy.uint16) == base_m[g, :n_rows].view(cupy.uint16)).all()), \
                f"masked group {g}"
    finally:
        plans.PLANS.clear()


GROUPED_SWITCH_TILES = {"128x128 c2B": (128, 128, 5, 2, 0, 8), "128x128 2acc": (128, 128, 5, 1, 1, 8, 1),
                        "256x128 c2A": (256, 128, 3, 2, 1, 8), "128x192 c2B": (128, 192, 4, 2, 0, 8),
                        "64x64": (64, 64, 8, 1, 1, 8)}


@DENSE_K_MAJOR
@pytest.mark.parametrize("config", ["128x128 c2B", "128x128 2acc", "256x128 c2A", "128x192 c2B"])
def test_dense_grouped_skip_idle_wg(config, monkeypatch):
    """FP8GEMM_DENSE_SKIP_IDLE_WG (lab), grouped: the second 128-row tiles of 64 rows or fewer leave
    their second warpgroup idle (grouped_same_bits_under_switch's groups)."""
    from fp8gemm.dispatch import Dense
    grouped_same_bits_under_switch(monkeypatch, Dense(*GROUPED_SWITCH_TILES[config]), "SKIP_IDLE_WG_SWITCH",
                                   dense.SKIP_IDLE_WG_PRELUDE, 53)


@DENSE_K_MAJOR
@pytest.mark.parametrize("config", ["128x128 c2B", "128x128 2acc", "64x64"])
def test_dense_grouped_a_box_shift(config, monkeypatch):
    """FP8GEMM_DENSE_A_BOX_SHIFT (on by default), grouped: the last group's last tile reaches past A's rows
    (its box moves up into the groups before it)."""
    from fp8gemm.dispatch import Dense
    grouped_same_bits_under_switch(monkeypatch, Dense(*GROUPED_SWITCH_TILES[config]), "A_BOX_SHIFT_SWITCH",
                                   dense.A_BOX_SHIFT_PRELUDE, 59)


@DENSE_K_MAJOR
@pytest.mark.parametrize("config,k", [("128x128 c2B", 4096), ("128x128 2acc", 4096), ("64x64", 4096),
                                      ("128x128 c2B", 2048)], ids=str)
def test_dense_grouped_sfa_wide_window(config, k, monkeypatch):
    """FP8GEMM_DENSE_SFA_WIDE_WINDOW (on by default), grouped: the swizzled As window of 32 (K = 4096) or 16
    (K = 2048, the MoE's L2) K blocks from each tile's first row (any row; grouped_same_bits_under_switch's
    groups)."""
    from fp8gemm.dispatch import Dense
    c = Dense(*GROUPED_SWITCH_TILES[config])
    wide = 32 if k == 4096 else 16
    monkeypatch.setattr(dense, "SFA_WIDE_WINDOW_SWITCH", True)
    assert c.sfa_window_for(k, "bfloat16", True, 8) == wide, "the wide window does not fit: nothing tested"
    grouped_same_bits_under_switch(monkeypatch, c, "SFA_WIDE_WINDOW_SWITCH", None, 61, k=k,
                                   kernel_is=lambda key: key[1] == c.variant and key[2][-1] == wide)


@DENSE_K_MAJOR
def test_dense_grouped_equals_plain_dense_per_group():
    """Bit for bit: a group's rows through the grouped dense mode equal the plain dense kernel on
    that group alone (same tile, same K order), where the group starts on a tile boundary."""
    import cupy
    from fp8gemm.dispatch import Dense
    config = Dense(128, 128, 5, 1, 1, 8)
    a, sa, b, sb, offsets = contiguous_case([128, 256, 77], 512, 2048, seed=41)
    out = fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, config=config)
    for g, (lo, hi) in enumerate(zip(offsets.get()[:-1], offsets.get()[1:])):
        want = fp8gemm.matmul(a[lo:hi], b[g], sa[lo:hi], sb[g], config=config)
        assert bool((out[lo:hi] == want).all()), f"group {g} differs from its plain dense GEMM"
