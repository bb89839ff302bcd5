"""GPU tests of the dense mainloop (sm90_fp8_gemm_dense), forced with ``config=Dense(...)``: every
tile height (64, 128, 256 rows: one wave, two warpgroups, two waves), widths that divide 128 and
widths that straddle two Bs rows (48, 96, 112, 144, 160), CTA pairs sharing A or B
(odd tile counts leave a CTA without a partner or without a tile), two accumulators in turn on
one-wave tiles, M / N / K tails, bf16 and fp16
out, TMA and direct stores; against the float64 reference, bit-exact on dyadic inputs, bitwise
repeatable, inside NaN-poisoned buffers. As in both layouts the kernel reads by TMA: M-major (a
column per stage) and K-major (windows of 4 or 8 K blocks in a ring; packed, and padded where K / 128 is
not a multiple of 4; flat where packed rows hold at most 8 K blocks: by default at 4 and 8 too, whose
window form test_forced_flat_wide keeps covered)."""
from types import SimpleNamespace

import numpy as np
import pytest

from generators import random_case
from test_matmul_general import FP8_NAN, check, check_bit_exact, outside, poisoned

import fp8gemm
from fp8gemm.dispatch import Dense, General, dense

pytestmark = pytest.mark.gpu


def m_major(sa, pad_rows: int = 4):
    """a_scale [M, KB] as an M-major view whose column stride is M rounded up to ``pad_rows``
    (16 bytes: the TMA map's rule), as quantize_per_token_group(m_major_scales=True) writes it."""
    import cupy
    m, kb = sa.shape
    mp = -(-m // pad_rows) * pad_rows
    buf = cupy.zeros((kb, mp), dtype=cupy.float32)
    buf[:, :m] = sa.T
    return buf[:, :m].T


def k_major_padded(sa, pad: int = 4):
    """a_scale [M, KB] K-major with its row stride KB rounded up to ``pad`` floats (16 bytes: the
    window's TMA rule where KB is not a multiple of 4), padding NaN."""
    import cupy
    m, kb = sa.shape
    buf = cupy.full((m, -(-kb // pad) * pad), np.nan, dtype=cupy.float32)
    buf[:, :kb] = sa
    return buf[:, :kb]


# (block_m, block_n, stages, cluster, multicast_a, group)
CONFIGS = [
    (128, 128, 5, 1, 1, 8), (256, 128, 3, 2, 1, 8), (256, 128, 3, 2, 0, 8), (64, 64, 8, 1, 1, 8),
    (64, 32, 10, 1, 1, 16), (128, 96, 5, 1, 1, 8), (128, 48, 6, 2, 1, 8), (128, 112, 5, 1, 0, 8),
    (128, 144, 4, 1, 1, 8), (128, 160, 4, 2, 0, 16), (256, 96, 3, 2, 1, 8), (64, 144, 6, 1, 1, 8),
    (256, 64, 4, 1, 1, 8), (64, 16, 12, 2, 1, 8),
    (64, 32, 16, 1, 0, 8), (64, 96, 10, 2, 0, 16), (128, 192, 4, 2, 0, 16),  # DeepGEMM's tiles (peer_configs)
    (128, 128, 5, 1, 1, 8, 1), (64, 64, 8, 1, 1, 8, 1), (128, 64, 6, 2, 0, 8, 1),   # two accumulators
]
# M tails inside a warpgroup, a wave, a second tile; N tails (not a multiple of 8 too: direct
# stores) and N not a multiple of any width; K tails (a partial last K block).
SHAPES = [(1, 128, 128), (100, 136, 400), (129, 256, 1024), (300, 1000, 1536), (257, 520, 2064),
          (1000, 4096, 4096), (4100, 1544, 512), (777, 1300, 7168), (65, 300, 272)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: Dense(*c).label().replace(" ", "_"))
@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
def test_forced(m, n, k, cfg):
    case = random_case(m, n, k, seed=m + 3 * n + k)
    out = fp8gemm.matmul(case.a, case.b, m_major(case.a_scale), case.b_scale, config=Dense(*cfg))
    check(out, case)


K_MAJOR = pytest.mark.skipif(not dense.K_MAJOR_SWITCH, reason="the K-major As window is off (FP8GEMM_DENSE_K_MAJOR=0)")


@K_MAJOR
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: Dense(*c).label().replace(" ", "_"))
@pytest.mark.parametrize("m,n,k", SHAPES, ids=str)
def test_forced_k_major(m, n, k, cfg):
    """Our quantizer's layout: packed where its rows are 16-byte multiples (the window reads past
    K / 128 as zeros), else in a padded buffer (NaN padding never read into a sum)."""
    case = random_case(m, n, k, seed=m + 5 * n + k)
    kb = case.a_scale.shape[1]
    sa = case.a_scale if kb % 4 == 0 or m == 1 else k_major_padded(case.a_scale)
    out = fp8gemm.matmul(case.a, case.b, sa, case.b_scale, config=Dense(*cfg))
    check(out, case)


# Packed As rows of 1-7 K blocks (4-28 bytes: not 16-byte multiples), read flat: M tails, a K
# tail, kb = 1 beside M > 1.
FLAT_SHAPES = [(100, 136, 256), (300, 1000, 384), (257, 520, 640), (1000, 4096, 256), (4100, 1544, 896),
               (65, 300, 208), (129, 256, 768), (513, 264, 128)]


def packed_as_in_nan(case):
    """(As, K / 128): the case's packed As copied 16 bytes into a NaN-filled buffer (a box reading
    past its M * K / 128 floats puts NaN into the sum)."""
    import cupy
    m, kb = case.a_scale.shape
    buf = cupy.full((m * kb + 4 + 256,), np.nan, dtype=cupy.float32)
    sa = buf[4:4 + m * kb].reshape(m, kb)
    sa[...] = case.a_scale
    return sa, kb


def same_bits_under_switch(monkeypatch, switch, prelude, cfg, m, n, k, seed, what):
    """A dense lab switch against its off form: A inside a NaN-filled buffer, the output inside one;
    the switch's result against the reference and bitwise the off form's, nothing outside the view."""
    import cupy
    import torch
    case = random_case(m, n, k, seed=seed)
    a, _ = poisoned(case.a, FP8_NAN, pad_rows=16, pad_cols=32)
    c = Dense(*cfg)
    monkeypatch.setattr(dense, switch, False)                      # the off form's bits first
    assert prelude not in c.prelude()
    base = cupy.asarray(fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=c)).view(cupy.uint16)
    monkeypatch.setattr(dense, switch, True)
    assert prelude in c.prelude()
    buf = torch.full((m + 2, n + 24), float("nan"), dtype=torch.bfloat16, device="cuda")
    view = buf[1:1 + m, 8:8 + n]
    assert fp8gemm.matmul(a, case.b, case.a_scale, case.b_scale, out=view, config=c) is view
    check(view, case)
    assert bool(cupy.isnan(outside(cupy.from_dlpack(buf.float()), 1, 8, m, n)).all()), "a write outside the view"
    got = cupy.from_dlpack(view.contiguous()).view(cupy.uint16)
    assert bool((got == base).all()), f"{what} gives other bits"


# every tile height, pairs sharing A (the As run multicast) and B, straddling widths, two
# accumulators (each (N, K) is its own compile: N and K are template arguments)
FLAT_CONFIGS = [CONFIGS[i] for i in (0, 1, 2, 3, 5, 6, 10, 13, 16, 17)]


@K_MAJOR
@pytest.mark.parametrize("cfg", FLAT_CONFIGS, ids=lambda c: Dense(*c).label().replace(" ", "_"))
@pytest.mark.parametrize("m,n,k", FLAT_SHAPES, ids=str)
def test_forced_k_major_flat(m, n, k, cfg):
    """Our quantizer's packed As where K / 128 (at most 8) is not a multiple of 4: the kernel
    reads the tile's rows as one run (kSfaFlat). The As lies inside a NaN-filled buffer, 16 bytes
    in: a box reading past its M * K / 128 floats would put NaN into the sum."""
    case = random_case(m, n, k, seed=m + 7 * n + k)
    sa, kb = packed_as_in_nan(case)
    assert dense.sfa_flat(SimpleNamespace(m=m, k=k, sa_ptr=sa.data.ptr, sa_stride_m=kb, sa_stride_k=1))
    out = fp8gemm.matmul(case.a, case.b, sa, case.b_scale, config=Dense(*cfg))
    check(out, case)


# Packed As rows of 4 and 8 K blocks (16 / 32 bytes) read flat (FP8GEMM_DENSE_FLAT_WIDE, the default): M tails,
# a K tail (1008: 8 blocks, the last 112 wide), one row tile and less.
FLAT_WIDE_SHAPES = [(100, 1000, 512), (300, 1536, 1024), (4100, 1544, 1008), (33, 4096, 1024), (1, 256, 512)]


@K_MAJOR
@pytest.mark.parametrize("cfg", FLAT_CONFIGS, ids=lambda c: Dense(*c).label().replace(" ", "_"))
@pytest.mark.parametrize("m,n,k", FLAT_WIDE_SHAPES, ids=str)
def test_forced_flat_wide(m, n, k, cfg, monkeypatch):
    """FP8GEMM_DENSE_FLAT_WIDE (the default): the packed As of 4 or 8 K blocks read as one run (kSfaFlatWide)
    instead of a window; the As inside a NaN-filled buffer, 16 bytes in (a box past its M * K / 128
    floats would put NaN into the sum); against the reference and bitwise the window's result."""
    import cupy
    case = random_case(m, n, k, seed=m + 5 * n + k)
    sa, kb = packed_as_in_nan(case)
    c = Dense(*cfg)
    monkeypatch.setattr(dense, "FLAT_WIDE_SWITCH", False)        # the window's bits first
    assert not dense.sfa_flat(SimpleNamespace(m=m, k=k, sa_ptr=sa.data.ptr, sa_stride_m=kb, sa_stride_k=1))
    window = cupy.asarray(fp8gemm.matmul(case.a, case.b, sa, case.b_scale, config=c)).view(cupy.uint16)
    monkeypatch.setattr(dense, "FLAT_WIDE_SWITCH", True)
    assert dense.sfa_flat(SimpleNamespace(m=m, k=k, sa_ptr=sa.data.ptr, sa_stride_m=kb, sa_stride_k=1))
    out = fp8gemm.matmul(case.a, case.b, sa, case.b_scale, config=c)
    check(out, case)
    assert bool((cupy.asarray(out).view(cupy.uint16) == window).all()), "the wide flat As gives other bits"


# below one row tile: 64-row tiles (one and two accumulators), 128 and 256 rows, pairs sharing A
# (the short box multicast) and B, a straddling width
SHORT_BOX_CONFIGS = [(64, 16, 15, 1, 0, 8, 1), (64, 32, 16, 1, 0, 8), (128, 128, 5, 1, 1, 8), (256, 128, 3, 2, 1, 8),
                     (256, 128, 3, 2, 0, 8), (128, 96, 5, 1, 1, 8)]


@K_MAJOR
@pytest.mark.parametrize("cfg", SHORT_BOX_CONFIGS, ids=lambda c: Dense(*c).label().replace(" ", "_"))
@pytest.mark.parametrize("m", [1, 5, 32, 33, 100, 200])
def test_short_a_box(m, cfg, monkeypatch):
    """FP8GEMM_DENSE_SHORT_A_BOX (the default): below one row tile the A box is round_up(M, 8) rows and the
    rows past it keep stale shared memory, which must reach no stored row. A inside a NaN-filled
    buffer, the output inside one; against the reference and bitwise the full box's result."""
    same_bits_under_switch(monkeypatch, "SHORT_A_BOX_SWITCH", dense.SHORT_A_BOX_PRELUDE, cfg, m, 1000, 1024, m + 11,
                           "the short A box")


@pytest.mark.parametrize("cfg", SHORT_BOX_CONFIGS, ids=lambda c: Dense(*c).label().replace(" ", "_"))
@pytest.mark.parametrize("m,n,k", [(5000, 1000, 1024), (2000, 4096, 256), (33, 24576, 1152)], ids=str)
def test_sfb_ahead(m, n, k, cfg, monkeypatch):
    """FP8GEMM_DENSE_SFB_AHEAD (lab): the next tile's Bs loaded before this tile's Bs store and
    barrier. Shapes with more tiles than SMs at every tile here, 256-row pairs included (each CTA
    runs several, so the carried Bs is used), and an N tail; against the reference and bitwise the
    default order's result."""
    import cupy

    from fp8gemm.launcher import sm_count
    c = Dense(*cfg)
    assert -(-m // c.block_m) * -(-n // c.block_n) > sm_count(0), "a CTA would run one tile: nothing carried"
    case = random_case(m, n, k, seed=m + 3 * n + k)
    sa = m_major(case.a_scale)
    base = cupy.asarray(fp8gemm.matmul(case.a, case.b, sa, case.b_scale, config=c)).view(cupy.uint16)
    monkeypatch.setattr(dense, "SFB_AHEAD_SWITCH", True)
    assert dense.SFB_AHEAD_PRELUDE in c.prelude()
    out = fp8gemm.matmul(case.a, case.b, sa, case.b_scale, config=c)
    check(out, case)
    assert bool((cupy.asarray(out).view(cupy.uint16) == base).all()), "the Bs load ahead gives other bits"


# tiles whose last row tile leaves a warpgroup with no row below M: 128 rows at M = 50 and 4160 (its
# second warpgroup), 256-row pairs at M = 300 (rows 320-383 and 448-511: the second warpgroup's
# waves), two accumulators; an N tail
SKIP_IDLE_CASES = [((128, 128, 5, 1, 1, 8), 50), ((128, 128, 5, 1, 1, 8, 1), 4160), ((256, 128, 3, 2, 1, 8), 300),
                   ((128, 96, 5, 1, 1, 8), 4160), ((128, 128, 5, 2, 0, 8), 4160)]


@pytest.mark.parametrize("cfg,m", SKIP_IDLE_CASES, ids=str)
@pytest.mark.parametrize("k", [1024, 2048], ids=str)
def test_skip_idle_wg(m, k, cfg, monkeypatch):
    """FP8GEMM_DENSE_SKIP_IDLE_WG (lab): a warpgroup with no row below M runs no wgmma and keeps
    the ring's pace; A and the output in NaN-filled buffers; against the reference and bitwise the
    switch-off result (the idle rows are never stored either way)."""
    same_bits_under_switch(monkeypatch, "SKIP_IDLE_WG_SWITCH", dense.SKIP_IDLE_WG_PRELUDE, cfg, m, 1000, k,
                           m + 1000 + 5 * k, "skipping the idle warpgroup")


@K_MAJOR
@pytest.mark.parametrize("cfg", SHORT_BOX_CONFIGS, ids=lambda c: Dense(*c).label().replace(" ", "_"))
@pytest.mark.parametrize("m", [1, 5, 32, 33, 63, 100])
@pytest.mark.parametrize("k", [2048, 4096], ids=str)
def test_short_sfa_box(m, k, cfg, monkeypatch):
    """FP8GEMM_DENSE_SHORT_SFA_BOX (lab): below one row tile the K-major As window's box is
    round_up(M, 8) rows and the rows past it keep stale shared memory, which must reach no stored
    row (M = 100 at 64-row tiles: the switch changes nothing there). A inside a NaN-filled buffer,
    the output inside one; against the reference and bitwise the full window's result."""
    c = Dense(*cfg)
    assert not dense.sfa_flat(SimpleNamespace(m=m, k=k, sa_ptr=256, sa_stride_m=k // 128, sa_stride_k=1))
    assert dense.sfa_box_rows(m, c.block_m, True, False) == (min(c.block_m, -(-m // 8) * 8) if m < c.block_m
                                                              else c.block_m)
    same_bits_under_switch(monkeypatch, "SHORT_SFA_BOX_SWITCH", dense.SHORT_SFA_BOX_PRELUDE, cfg, m, 1000, k,
                           3 * m + k, "the short As window")


# tiles whose last row tile reaches 8 or more rows past A, so that the box moves (a_box_shift): 64-row
# tiles (two accumulators, a straddling width), 128 rows (one and two accumulators, pairs sharing A
# and B, 64 and 96 columns); M with 1-7 rows past the moved box too. 256-row tiles keep their box
# (test_kernels_compile.py: test_dense_a_box_shift_prelude, the same code with the prelude).
A_BOX_SHIFT_CASES = [((64, 16, 15, 1, 0, 8, 1), 100), ((64, 48, 15, 1, 0, 8), 158), ((128, 128, 5, 1, 1, 8), 158),
                     ((128, 128, 5, 1, 1, 8, 1), 214), ((128, 64, 6, 1, 1, 8), 300), ((128, 128, 5, 2, 1, 8), 4161),
                     ((128, 128, 5, 2, 0, 8), 4160), ((64, 96, 8, 2, 0, 8), 150), ((128, 96, 5, 1, 1, 8), 4100)]


@pytest.mark.parametrize("cfg,m", A_BOX_SHIFT_CASES, ids=str)
@pytest.mark.parametrize("k", [1024, 2048], ids=str)
def test_a_box_shift(m, k, cfg, monkeypatch):
    """FP8GEMM_DENSE_A_BOX_SHIFT (on by default): the last row tile's A box moved up by whole 8-row atoms and
    the wgmma descriptors that many rows in; the rows past the stage come from other shared memory
    and reach only rows past M. A and the output in NaN-filled buffers (the rows just past M are
    NaN in memory, outside the map); against the reference and bitwise the switch-off result."""
    c = Dense(*cfg)
    last = (-(-m // c.block_m) - 1) * c.block_m
    assert last > 0 and last + c.block_m - m >= 8, "the box would not move: nothing tested"
    same_bits_under_switch(monkeypatch, "A_BOX_SHIFT_SWITCH", dense.A_BOX_SHIFT_PRELUDE, cfg, m, 1000, k,
                           m + 7 * k, "the moved A box")


# the wide As window's tiles (64 and 128 rows, one and two accumulators, a straddling width, pairs
# sharing A and B) at M values with partial row tiles, below one tile and a second tile
WIDE_WINDOW_CASES = [((64, 64, 8, 1, 1, 8, 1), 100), ((64, 48, 12, 1, 0, 8), 37), ((128, 128, 5, 1, 1, 8, 1), 300),
                  ((128, 64, 6, 1, 1, 8), 158), ((128, 96, 5, 1, 1, 8), 129), ((128, 64, 6, 2, 0, 8), 500),
                  ((64, 32, 10, 2, 1, 8), 1)]


@K_MAJOR
@pytest.mark.parametrize("cfg,m", WIDE_WINDOW_CASES, ids=str)
@pytest.mark.parametrize("k,padded", [(4096, False), (8192, False), (4096, True), (2048, False)], ids=str)
def test_sfa_wide_window(m, k, padded, cfg, monkeypatch):
    """FP8GEMM_DENSE_SFA_WIDE_WINDOW (on by default): the K-major As window of 32 K blocks, 128B-swizzled (one or
    two windows per tile), or at K = 2048 of 16, 64B-swizzled. A packed As inside a NaN-filled buffer (a box reading past it, or an
    unswizzled read of a swizzled window, puts NaN or another row's scale into the sum) or a padded
    one (row stride 40 floats, NaN between); the output inside a NaN buffer; against the reference
    and bitwise the window of 8's result."""
    import cupy
    import torch
    n = 1000
    case = random_case(m, n, k, seed=11 * m + k + padded)
    sa = k_major_padded(case.a_scale, 40) if padded else packed_as_in_nan(case)[0]
    c = Dense(*cfg)
    monkeypatch.setattr(dense, "SFA_WIDE_WINDOW_SWITCH", False)
    assert c.sfa_window_for(k) == 8
    base = cupy.asarray(fp8gemm.matmul(case.a, case.b, sa, case.b_scale, config=c)).view(cupy.uint16)
    monkeypatch.setattr(dense, "SFA_WIDE_WINDOW_SWITCH", True)
    assert c.sfa_window_for(k) == (32 if k % 4096 == 0 else 16), "the wide window does not fit this tile: nothing tested"
    buf = torch.full((m + 2, n + 24), float("nan"), dtype=torch.bfloat16, device="cuda")
    view = buf[1:1 + m, 8:8 + n]
    assert fp8gemm.matmul(case.a, case.b, sa, case.b_scale, out=view, config=c) is view
    check(view, case)
    assert bool(cupy.isnan(outside(cupy.from_dlpack(buf.float()), 1, 8, m, n)).all()), "a write outside the view"
    got = cupy.from_dlpack(view.contiguous()).view(cupy.uint16)
    assert bool((got == base).all()), "the wide As window gives other bits"


@pytest.mark.parametrize("cfg", CONFIGS[:6], ids=lambda c: Dense(*c).label().replace(" ", "_"))
@pytest.mark.parametrize("m,n,k", [(300, 1000, 1536), (129, 264, 4096)], ids=str)
def test_fp16(m, n, k, cfg):
    case = random_case(m, n, k, seed=2 * m + n + k)
    out = fp8gemm.matmul(case.a, case.b, m_major(case.a_scale), case.b_scale, out_dtype="float16",
                         config=Dense(*cfg))
    check(out, case, "float16")


@pytest.mark.parametrize("cfg", [CONFIGS[0], CONFIGS[1], CONFIGS[5], CONFIGS[9]],
                         ids=lambda c: Dense(*c).label().replace(" ", "_"))
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16"])
def test_exact_dyadic(out_dtype, cfg):
    case = random_case(300, 1000, 1040, seed=17, dyadic=True)
    out = fp8gemm.matmul(case.a, case.b, m_major(case.a_scale), case.b_scale, out_dtype=out_dtype,
                         config=Dense(*cfg))
    check_bit_exact(out, case, out_dtype)


@pytest.mark.parametrize("cfg", [CONFIGS[1], CONFIGS[2], CONFIGS[6]], ids=lambda c: Dense(*c).label().replace(" ", "_"))
def test_repeatable_and_equal_to_general(cfg):
    """Pairs and multicast change where the operands come from, not the sums: 20 runs give the same
    bits, and the 128-wide tiles give the general kernel's bits (the same 4 wgmma and the same
    promotion per K block in the same order)."""
    import cupy
    case = random_case(2000, 4096, 2048, seed=23)
    sa = m_major(case.a_scale)
    first = cupy.asarray(fp8gemm.matmul(case.a, case.b, sa, case.b_scale, config=Dense(*cfg))).view(cupy.uint16)
    for _ in range(20):
        again = cupy.asarray(fp8gemm.matmul(case.a, case.b, sa, case.b_scale, config=Dense(*cfg))).view(cupy.uint16)
        assert bool((again == first).all()), "not bitwise repeatable"
    if dense.K_MAJOR_SWITCH:
        k_major = cupy.asarray(fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=Dense(*cfg)))
        assert bool((k_major.view(cupy.uint16) == first).all()), "the As layouts give other bits"
    if cfg[1] == 128:
        want = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=General(128, 4, 8))
        assert bool((cupy.asarray(want).view(cupy.uint16) == first).all()), "differs from the general kernel"


@pytest.mark.parametrize("cfg", [CONFIGS[0], CONFIGS[1], CONFIGS[5]], ids=lambda c: Dense(*c).label().replace(" ", "_"))
@pytest.mark.parametrize("m,n,k,pad", [(200, 300, 1040, 24), (200, 300, 1040, 20), (300, 136, 512, 24),
                                       (130, 1000, 256, 24)], ids=str)
def test_nan_poisoned_borders(m, n, k, pad, cfg):
    """Inputs and output inside NaN-filled buffers; the As buffer's padding rows are NaN too."""
    import cupy
    import torch
    case = random_case(m, n, k, seed=5)
    a, _ = poisoned(case.a, FP8_NAN, pad_cols=32)
    b, _ = poisoned(case.b, FP8_NAN, pad_cols=32)
    sb, _ = poisoned(case.b_scale, np.nan, pad_cols=4, col0=2)
    kb = case.a_scale.shape[1]
    sa_buf = cupy.full((kb + 2, -(-(m + 12) // 4) * 4), np.nan, dtype=cupy.float32)   # 16-byte columns
    sa_buf[1:1 + kb, 4:4 + m] = case.a_scale.T
    sa = sa_buf[1:1 + kb, 4:4 + m].T
    buf = torch.full((m + 2, n + pad), float("nan"), dtype=torch.bfloat16, device="cuda")
    view = buf[1:1 + m, 8:8 + n]
    assert fp8gemm.matmul(a, b, sa, sb, out=view, config=Dense(*cfg)) is view
    check(view, case)
    assert bool(cupy.isnan(outside(cupy.from_dlpack(buf.float()), 1, 8, m, n)).all()), "a write outside the view"


@K_MAJOR
@pytest.mark.parametrize("m,n,k", [(48, 4096, 1024), (8, 8192, 1024), (33, 1536, 4096)], ids=str)
def test_small_m_tuner_candidates(m, n, k):
    """What fp8gemm-tune may put in a table at M <= 64 (DeepGEMM's 64-row tile, one and two
    accumulators: Dense.tuner_candidates) on our quantizer's K-major As, inside a NaN-filled
    output buffer, and bitwise the general kernel's 64-row tile of the same width (the
    batch-invariant mode takes such a default pick)."""
    import cupy
    import torch
    from fp8gemm.dispatch.variant import GemmDesc
    cands = Dense.tuner_candidates(GemmDesc(m, n, k))
    assert cands, "no dense candidate at small M"
    case = random_case(m, n, k, seed=m + n + k)
    want = cupy.asarray(fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale,
                                       config=General(cands[0].block_n, 4, 8, 1, 64))).view(cupy.uint16)
    for c in cands:
        buf = torch.full((m + 2, n + 16), float("nan"), dtype=torch.bfloat16, device="cuda")
        view = buf[1:1 + m, 8:8 + n]
        assert fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out=view, config=c) is view
        check(view, case)
        assert bool(cupy.isnan(outside(cupy.from_dlpack(buf.float()), 1, 8, m, n)).all()), "a write outside the view"
        got = cupy.from_dlpack(view.contiguous()).view(cupy.uint16)
        assert bool((got == want).all()), f"{c.label()}: other bits than the general 64-row tile"


def test_refused():
    """An a_scale TMA cannot read (packed K-major with K / 128 not a multiple of 4, a broadcast
    row), fp32 out, widths the kernel has no wgmma for, whose tile would reach three Bs rows, or
    whose sums would not fit the registers."""
    import cupy
    odd = random_case(256, 512, 2064, seed=1)
    with pytest.raises(ValueError, match="M-major"):
        fp8gemm.matmul(odd.a, odd.b, odd.a_scale, odd.b_scale, config=Dense())
    case = random_case(256, 512, 1024, seed=1)
    row = cupy.broadcast_to(cupy.asarray(case.a_scale)[:1], case.a_scale.shape)
    with pytest.raises(ValueError, match="M-major"):
        fp8gemm.matmul(case.a, case.b, row, case.b_scale, config=Dense())
    sa = m_major(case.a_scale)
    # (128 x 192 is valid since session 40: 192 accumulator floats per thread, no spills)
    for cfg, dt in ((Dense(), "float32"), (Dense(128, 200), "bfloat16"), (Dense(128, 12), "bfloat16"),
                    (Dense(128, 208), "bfloat16"), (Dense(256, 160, 2), "bfloat16"),
                    (Dense(96, 128), "bfloat16"), (Dense(256, 128, 3, 2, 1, 7), "bfloat16")):
        with pytest.raises(ValueError, match="not valid"):
            fp8gemm.matmul(case.a, case.b, sa, case.b_scale, out_dtype=dt, config=cfg)


@pytest.mark.parametrize("m,n,k", [(4100, 576, 7168), (3000, 1000, 1536), (200, 2880, 4096), (700, 1000, 2048)],
                         ids=str)
def test_dispatcher_picks_the_model(m, n, k, monkeypatch):
    """Untuned shapes where the fallback's dense model (Dense.model, FP8GEMM_DENSE_MODEL=1) chooses
    the kernel: correct with our quantizer's K-major As, and with an As the dense kernel's TMA
    cannot read (a K-major view with an odd row stride) the older kernels' model runs instead, also
    correct."""
    import cupy

    from fp8gemm.dispatch import select, selector
    monkeypatch.setattr(selector, "DENSE_MODEL", True)
    select.cache_clear()
    try:
        c = select(m, n, k)
        assert isinstance(c, Dense) and "model" in c.reason, c
        case = random_case(m, n, k, seed=m + n + k)
        check(fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale), case)
        kb = case.a_scale.shape[1]
        odd = cupy.full((m, kb + 1), np.nan, dtype=cupy.float32)      # row stride KB + 1: not 16-byte rows
        odd[:, :kb] = case.a_scale
        check(fp8gemm.matmul(case.a, case.b, odd[:, :kb], case.b_scale), case)
    finally:
        select.cache_clear()                     # no choice made under the switch outlives the test
