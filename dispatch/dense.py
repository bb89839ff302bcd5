"""``Dense`` (sm90_fp8_gemm_dense): the dense mainloop built the way DeepGEMM's SM90 kernel is
(kernels_cu/sm90_fp8_gemm_dense.cu says how): N and the K-block count compiled in, As by TMA
with each stage (M-major as a column, K-major as a 4-block window), Bs in shared memory once per
tile, tiles of 64 / 128 / 256 rows and 16-256 columns, 1 x 2 CTA pairs with TMA multicast of the
shared operand.

The tuner measures it beside the other kernels (tuner_candidates); a table entry picks it, and
the fallback model (Dense.model) where no entry covers a shape. Callers whose As TMA cannot read
(scales_ok) get the other kernels' model instead (fp8gemm/api.py).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

from .. import compiler, tma
from ..dtypes import KERNEL_TYPE_IDS, OUT_BYTES
from ..hw import MAX_SMEM_PER_BLOCK
from ..launcher import (NARROW_ROW_BYTES, NO_GROUPS, Plan, check_units, gemm_args, group_args, sm_count, tma_store_ok,
                        token_tiles)
from .general import m_major_as_map, prefix_bytes
from .variant import BLOCK_K, DEFAULT_NUM_SMS, FLAG, Candidate, GemmDesc, cdiv

BLOCK_MS = (64, 128, 256)
PRODUCER_THREADS = 128
BARRIER_BYTES = 16              # per stage: a full and an empty mbarrier
# NOTES (bench/NOTES.md sessions 37-38): the K-major window's first GPU run faulted in every
# instantiation (a TMA box whose inner coordinate was not a multiple of 16 bytes); fixed, it passed
# the H100 suite and the four sanitizers. FP8GEMM_DENSE_K_MAJOR=0 turns it off (forced K-major
# configs and the grouped dense mode refuse, the tuner offers no dense configuration).
K_MAJOR_SWITCH = os.environ.get("FP8GEMM_DENSE_K_MAJOR", "1") != "0"
# Tiles whose rows are 64 * odd bytes (96 bf16 columns) stored directly cost about 440 SASS
# instructions per thread and half-sector writes, against DeepGEMM's 64B-swizzled TMA store (about
# 73); the kernel stages them 64B-swizzled (epilogue.cuh, kSwz = 64). Rows of 16 or 32 bytes (the
# 64-row tiles of 8 / 16 bf16 columns DeepGEMM's model picks at N = 512) stored directly, ~70-150
# instructions with a branch region per STG, against ~40 and one TMA store: staged as one
# unswizzled box (epilogue.cuh NarrowStaging, the general kernel's) and stored by TMA. Both on by
# default since session 42: the dense GPU tests passed with them (H100: 479; H200, session 41, the
# 64B staging's), and the H100 table (dispatch/h100.json) was tuned with them. Alone they measured
# within noise at DeepGEMM's tiles (bench/NOTES.md, session 42). =0 turns each off (lab A/B).
STORE_64B_SWITCH = os.environ.get("FP8GEMM_DENSE_STORE_64B", "1") != "0"
STORE_NARROW_SWITCH = os.environ.get("FP8GEMM_DENSE_STORE_NARROW", "1") != "0"
NARROW_ROWS = tuple(r for r in NARROW_ROW_BYTES if r % 64)    # 64-byte rows take the 64B swizzle
# K-major As comes in windows of 4 or 8 K blocks (16 / 32 bytes per row: TMA's least box is 16),
# one per 4 or 8 stages into a ring of its own (the kernel's header). 8 where K / 128 allows it (a
# row request per 8 K blocks); FP8GEMM_DENSE_SFA_WINDOW=4 or 8 forces one (lab A/B).
SFA_WINDOW_FORCED = int(os.environ.get("FP8GEMM_DENSE_SFA_WINDOW", "0") or 0)
# On by default since session 51 (FP8GEMM_DENSE_SFA_WIDE_WINDOW=0: the window of 8, lab A/B; first
# measured as FP8GEMM_DENSE_SFA_WINDOW32): where K / 128 is a multiple of 32 (K = 4096, 8192) the K-major As
# window is 32 K blocks, box {32, rows}: a tile's 64 or 128 rows of 128 bytes, one contiguous run in
# our quantizer's packed As (K = 4096), once per 32 stages, 128B-swizzled so that a warp's 8 rows of
# one column lie in 8 banks; where a multiple of 16 only (K = 2048, 6144: the MoE's L2 at K = 2048),
# 16 K blocks, rows of 64 bytes, 64B-swizzled. H200, session 49: DeepGEMM / ours +2.6% geomean on
# six K = 4096 shapes (same-run ratio; bench/NOTES.md). The window of 8 reads
# rows of 32 bytes, a quarter of each 128-byte line, four times per line; at K = 1024 the flat run
# (FLAT_WIDE_SWITCH) instead of such a window took 2-18% off (bench/NOTES.md, session 47). Only
# 64- and 128-row tiles, only where the two wide slots fit beside the ring and the staging (and in
# the grouped mode the tile prefix of its group count: sfa_window_for).
SFA_WIDE_WINDOW_SWITCH = os.environ.get("FP8GEMM_DENSE_SFA_WIDE_WINDOW", "1") != "0"
SFA_WIDE_WINDOWS = (32, 16)                # K blocks, the first that divides K / 128
WIDE_WINDOW_SWIZZLE = {32: tma.SWIZZLE_128B, 16: tma.SWIZZLE_64B}
# Unpaired tiles compiled without the cluster attribute (kernels_cu/sm90_fp8_gemm_dense.cu:
# FP8GEMM_DENSE_CLUSTER_DIMS) and launched plainly, as DeepGEMM launches its unpaired tiles; on by
# default since session 44 (FP8GEMM_DENSE_IMPLICIT_CLUSTER=0: every instantiation a cluster launch,
# lab A/B). H100, DeepGEMM's tile in the same process (bench/NOTES.md, session 44): 64 x 96 at
# 512 x 1536 x 4096 1.28x DeepGEMM's time -> 1.01x, 64 x 128 at 256 x 4096 x 4096 1.30x -> 1.00x,
# 128 x 96 at 384 x 4096 x 4096 1.19x -> 1.01x, 128 x 128 at 256 x 8192 x 4096 1.08x -> 1.00x: the
# one-wave unpaired gap was the cluster launch, not the loop (whose SASS matched DeepGEMM's).
IMPLICIT_CLUSTER_SWITCH = os.environ.get("FP8GEMM_DENSE_IMPLICIT_CLUSTER", "1") != "0"
IMPLICIT_CLUSTER_PRELUDE = "#define FP8GEMM_DENSE_IMPLICIT_CLUSTER 1\n"
# Below one row tile the A map's box is round_up(M, 8) rows, not block_m (the kernel's
# FP8GEMM_DENSE_SHORT_A_BOX says why; a_box_rows). On by default since session 47: H100, same process
# (bench/NOTES.md, session 46), our time / DeepGEMM's 1.267 -> 1.051 at 32 x 1536 x 1024, 1.042 ->
# 0.952 at 24 x 4096 x 4096; the 25 trace shapes DeepGEMM led geomean 0.91x -> 0.95x, tiles of
# M >= block_m rows unchanged. FP8GEMM_DENSE_SHORT_A_BOX=0 gives the full box (lab A/B).
SHORT_A_BOX_SWITCH = os.environ.get("FP8GEMM_DENSE_SHORT_A_BOX", "1") != "0"
SHORT_A_BOX_PRELUDE = "#define FP8GEMM_DENSE_SHORT_A_BOX 1\n"
# Lab switch (FP8GEMM_DENSE_SFB_AHEAD=1, off until measured): the next tile's Bs load before this
# tile's Bs store and barrier (the kernel's FP8GEMM_DENSE_SFB_AHEAD; a CPU SASS walk, session 44:
# 73 instructions from the barrier to the first wgmma at 64 x 16, 25 with it, DeepGEMM 19).
SFB_AHEAD_SWITCH = os.environ.get("FP8GEMM_DENSE_SFB_AHEAD", "0") == "1"
SFB_AHEAD_PRELUDE = "#define FP8GEMM_DENSE_SFB_AHEAD 1\n"
# Lab switch (FP8GEMM_DENSE_SKIP_IDLE_WG=1, off until measured): a math warpgroup whose rows all lie
# past the tile's end (a grouped tile past its group's end, the last row tile below M) waits and
# releases each stage but runs no wgmma (the kernel's FP8GEMM_DENSE_SKIP_IDLE_WG). Aimed at the
# grouped GEMMs at about 192 rows per expert (V4-Flash, 8192 tokens), where the second 128-row tile
# of most experts holds 64 rows or fewer, and half of that tile's wgmma work is on rows no one stores.
SKIP_IDLE_WG_SWITCH = os.environ.get("FP8GEMM_DENSE_SKIP_IDLE_WG", "0") == "1"
SKIP_IDLE_WG_PRELUDE = "#define FP8GEMM_DENSE_SKIP_IDLE_WG 1\n"
# On by default since session 51 (FP8GEMM_DENSE_A_BOX_SHIFT=0: the box at the tile's rows, lab A/B):
# the last row tile's A box moved up by
# whole 8-row atoms so that it ends less than 8 rows past A (the kernel's FP8GEMM_DENSE_A_BOX_SHIFT,
# the general kernel's GeneralTiles::a_box). Session 48's H100 tune state: with the box reaching 30-98
# rows past A the dense tiles ran up to 1.9x their time at the next M with whole tiles (128 x 64 at
# 8192 x 4096: 38.0 us at M = 158, 20.1 at M = 256), the general kernel (which moves its box) not. H200, session 49 (lab/a_box_shift_ab.py, same process):
# tiles reaching past A moved / not geomean 0.878 (0.507-1.032, 29 pairs; 128 x 64 at 158 x 8192 x 4096
# 36.13 -> 18.34 us), whole tiles 1.011 (noise); rows' bits unchanged (the box moves, not the sums).
# 64- and 128-row tiles only: the kernel leaves 256-row tiles' box (a spill there, its a_box_shift).
A_BOX_SHIFT_SWITCH = os.environ.get("FP8GEMM_DENSE_A_BOX_SHIFT", "1") != "0"
A_BOX_SHIFT_PRELUDE = "#define FP8GEMM_DENSE_A_BOX_SHIFT 1\n"
# Lab switch (FP8GEMM_DENSE_SHORT_SFA_BOX=1, off until measured): below one row tile the K-major As
# window's box has round_up(M, 8) rows, as the short A box has for A (the kernel's
# FP8GEMM_DENSE_SHORT_SFA_BOX; sfa_box_rows): the window's 64-row box at M = 24 zero-fills 40 rows a load.
SHORT_SFA_BOX_SWITCH = os.environ.get("FP8GEMM_DENSE_SHORT_SFA_BOX", "0") == "1"
SHORT_SFA_BOX_PRELUDE = "#define FP8GEMM_DENSE_SHORT_SFA_BOX 1\n"
# The producer chosen by elect.sync and its K loop unrolled by 8 (the kernel's
# FP8GEMM_DENSE_ELECT_PRODUCER): 25-30 SASS instructions per stage against 54-66, as DeepGEMM's.
# On by default since session 42: at DeepGEMM's 64-row tiles, where the producer is on the critical
# path, 64 x 16 and 64 x 32 two-accumulator tiles went from 1.05-1.11x DeepGEMM's time to
# 0.87-0.91x (H100 and H200, same process; bench/NOTES.md sessions 41-42); dense GPU tests passed
# with it. FP8GEMM_DENSE_ELECT_PRODUCER=0 gives the earlier producer (lab A/B).
ELECT_PRODUCER_SWITCH = os.environ.get("FP8GEMM_DENSE_ELECT_PRODUCER", "1") != "0"
ELECT_PRODUCER_PRELUDE = "#define FP8GEMM_DENSE_ELECT_PRODUCER 1\n"


def sfa_window(k: int) -> int:
    """K blocks per K-major As window for this K: 8 where K / 128 is a multiple of 8, else 4."""
    if SFA_WINDOW_FORCED in (4, 8):
        return SFA_WINDOW_FORCED
    return 8 if cdiv(k, BLOCK_K) % 8 == 0 else 4


def sfa_slots(stages: int, window: int, k: int) -> int:
    """Windows in the K-major ring (the kernel's kSfaSlots): with whole windows per tile, window j
    + slots is loaded only after the producer's empty wait released the stage of window j's last
    K block, so (slots - 1) * window + 1 >= stages; with a partial last window, one per stage."""
    if cdiv(k, BLOCK_K) % window:
        return stages
    return 1 + -(-(stages - 1) // window)


def a_box_rows(m: int, block_m: int, short_box: bool) -> int:
    """The plain mode's A box rows: with ``short_box`` (SHORT_A_BOX_SWITCH) round_up(M, 8) where M
    is below one row tile, else block_m. The kernel's full barrier expects the same (its
    FP8GEMM_DENSE_SHORT_A_BOX prelude), so the two must agree."""
    return min(block_m, -(-m // 8) * 8) if short_box and m < block_m else block_m


def threads(block_m: int) -> int:
    """One math warpgroup for 64-row tiles, two otherwise, and the producer warpgroup."""
    return (1 if block_m == 64 else 2) * 128 + PRODUCER_THREADS


def width_ok(block_n: int) -> bool:
    """wgmma widths 16-256 (multiples of 8) whose tile reaches at most two Bs rows: any width up
    to 128, above it only where block_n - 128 divides 128 (the kernel's static_assert)."""
    if block_n % 8 or not 16 <= block_n <= 256:
        return False
    return block_n <= 128 or 128 % (block_n - 128) == 0


# A packed K-major As of at most this many K blocks, not a multiple of 4, is read flat (the
# kernel's kSfaFlat): the tile's rows are one contiguous run, the whole K one window.
FLAT_MAX_KB = 8


# A packed As of 4 or 8 K blocks (rows of 16 / 32 bytes, which the {window, rows} box can read) is
# read flat too, as a few 256-float boxes of one contiguous run instead of one box of BLOCK_M short
# rows (the kernel's kSfaFlatWide); the same bits (tests/test_matmul_dense.py: test_forced_flat_wide).
# On by default since session 47: H100, our table's dense picks at the 12 trace shapes DeepGEMM led
# on the H200 (K = 1024, M 24-158), same process as DeepGEMM: our time 2-18% lower (10-18% on 9 of
# the 11 K = 1024 shapes; 48 x 4096 x 1024 4.80 -> 3.94 us), DeepGEMM's time / ours geomean 0.91x ->
# 1.06x (bench/NOTES.md, session 47). FP8GEMM_DENSE_FLAT_WIDE=0 gives the window (lab A/B).
FLAT_WIDE_SWITCH = os.environ.get("FP8GEMM_DENSE_FLAT_WIDE", "1") != "0"


def flat_kb_ok(kb: int, wide: bool | None = None) -> bool:
    """Whether a packed As of ``kb`` K blocks per row is read flat: rows not 16-byte multiples, or
    with ``wide`` (None: FLAT_WIDE_SWITCH) any K / 128 up to FLAT_MAX_KB."""
    wide = FLAT_WIDE_SWITCH if wide is None else wide
    return kb <= FLAT_MAX_KB and (kb % 4 != 0 or wide)


def sfa_flat(p, wide: bool | None = None) -> bool:
    """Whether this problem's As is read flat: K-major, packed (row stride K / 128, or one row),
    unit K stride, 16-byte aligned base, flat_kb_ok(K / 128, wide)."""
    kb = cdiv(p.k, BLOCK_K)
    return (flat_kb_ok(kb, wide) and (p.sa_stride_k == 1 or kb == 1) and p.sa_ptr % 16 == 0
            and (p.m == 1 or p.sa_stride_m == kb))


def k_major_kb_ok(kb: int) -> bool:
    """Whether our quantizer's packed K-major As of ``kb`` K blocks is TMA-readable: in windows
    (rows of whole 16 bytes) or flat."""
    return kb % 4 == 0 or flat_kb_ok(kb)


def k_major_as_ok(p) -> bool:
    """Whether TMA can read As K-major: in windows of 4 or 8 K blocks (box {window, rows}; unit K
    stride, a 16-byte aligned base and row stride, K / 128 blocks a multiple of 4 in a packed As,
    rows that do not overlap; one row has no row stride to speak of), or flat (sfa_flat)."""
    kb = cdiv(p.k, BLOCK_K)
    return sfa_flat(p) or ((p.sa_stride_k == 1 or kb == 1) and p.sa_ptr % 16 == 0 and (
        p.m == 1 or ((p.sa_stride_m * 4) % 16 == 0 and p.sa_stride_m >= kb)))


def scales_ok(p) -> bool:
    """Whether the dense kernel can read this problem's As (either layout by TMA; K-major only
    with the switch on)."""
    return m_major_as_ok(p) or (K_MAJOR_SWITCH and k_major_as_ok(p))


def flat_box(block_m: int, kb: int) -> int:
    """The flat As box in floats (the kernel's kSfaFlatBox): at most 256 floats, in 256-byte
    units that divide the tile's run of block_m * kb floats."""
    units = block_m * kb // 64
    return 64 * next(d for d in (4, 3, 2, 1) if units % d == 0)


def sfa_box_rows(m: int, block_m: int, short_box: bool, flat: bool) -> int:
    """The K-major As map's box rows in the plain mode: with ``short_box`` (the kernel's
    FP8GEMM_DENSE_SHORT_SFA_BOX prelude) round_up(M, 8) where M is below one row tile and the As is a
    window (not flat), else block_m. The kernel's full barrier expects the same, so the two agree."""
    return a_box_rows(m, block_m, short_box and not flat)


def k_major_as_map(p, rows: int, flat: bool | None = None, window: int | None = None):
    """As [M, K / 128] row-major, box {rows, ``window`` K blocks} (None: sfa_window(K); the wide
    windows of 32 or 16, 128 or 64 bytes a row, swizzled as the kernel reads them); TMA zero-fills past M. Flat
    (``flat``; None: sfa_flat(p)): one row of M * K / 128 floats, box flat_box; TMA zero-fills
    past its end. The map must be the form the kernel was compiled for (its kSfaWindowK and
    kSfaFlatWide): another box makes each stage's expected bytes wrong and the kernel hangs."""
    kb = cdiv(p.k, BLOCK_K)
    if sfa_flat(p) if flat is None else flat:
        run = p.m * kb
        return tma.encode_2d(p.sa_ptr, 1, run, -(-run * 4 // 16) * 16, 1, flat_box(rows, kb), 4, tma.SWIZZLE_NONE)
    row_stride = max(p.sa_stride_m, kb) if p.m == 1 else p.sa_stride_m
    window = sfa_window(p.k) if window is None else window
    swizzle = WIDE_WINDOW_SWIZZLE.get(window, tma.SWIZZLE_NONE)
    return tma.encode_2d(p.sa_ptr, p.m, kb, -(-row_stride * 4 // 16) * 16, rows, window, 4, swizzle)


def grouped_as_ok(p) -> bool:
    """Whether the grouped mode can read this As: K-major in windows only (its tiles start at a
    group's first row, any row, where a flat run's box cannot start)."""
    return k_major_as_ok(p) and not sfa_flat(p, wide=False)


def m_major_as_ok(p) -> bool:
    """Whether TMA can read the tile's As column of a K block: As M-major (unit M stride) with a
    16-byte aligned base and column stride that holds a column (a broadcast or overlapping As
    cannot be a TMA map). One row has no M stride to speak of (frameworks report any)."""
    return ((p.sa_stride_m == 1 or p.m == 1) and p.sa_ptr % 16 == 0 and (p.sa_stride_k * 4) % 16 == 0
            and p.sa_stride_k >= p.m)


# DeepGEMM 2.6.1's SM90 tile model (its csrc/jit_kernels/heuristics/sm90.hpp), restated: among
# 64 / 128 / 256-row tiles, widths 16-192 in steps of 16 (past 128 only where the tile reaches two
# Bs rows evenly), alone or in pairs sharing A or B, the fewest modelled cycles: the L1 and L2
# bytes each tile moves over those caches' bandwidths, divided by the last wave's fill; pairs only
# from two waves. Our kernel runs DeepGEMM's tiles at its speed (bench/NOTES.md, sessions 36-39),
# so the tuner measures this tile beside our own (peer_configs).
PEER_SMEM = 232448
PEER_MAX_STAGES = 16


def _peer_stages(block_m: int, block_n: int, k: int) -> int:
    """The stages DeepGEMM's model fits beside its bf16 staging, its Bs copy and its barriers."""
    kb = cdiv(k, BLOCK_K)
    cd = -(-block_m * block_n * 2 // 1024) * 1024
    sfb = -(-kb * 4 * (1 if 128 % block_n == 0 else 2) // 8) * 8
    per_stage = (block_m + block_n) * BLOCK_K + -(-block_m * 4 // 128) * 128
    return min((PEER_SMEM - cd - sfb - PEER_MAX_STAGES * 16) // per_stage, PEER_MAX_STAGES)


def _peer_cycles(m: int, n: int, k: int, block_m: int, block_n: int, pair_m: int, pair_n: int, num_sms: int) -> float:
    """DeepGEMM's modelled cycles of one layout (inf: a pair in one wave, which it never takes)."""
    tiles = cdiv(m, block_m) * cdiv(n, block_n)
    waves = cdiv(tiles, num_sms)
    if pair_m * pair_n > 1 and waves <= 1:
        return float("inf")
    l2_bw = int(min(64.0 * num_sms, 8e6 / 1.3e3))
    cd = block_m * block_n * 2
    l2 = (k * (block_m // pair_n + block_n // pair_m) + cd) * tiles // l2_bw
    l1 = (k * (block_m + block_n) + k * (max(64, block_m) + block_n) + 2 * cd) * tiles // (128 * num_sms)
    return int(max(l1, l2) / (tiles / (waves * num_sms)))


def peer_group(block_m: int, block_n: int, along_n: bool, num_sms: int = DEFAULT_NUM_SMS) -> int:
    """DeepGEMM's raster group (8 or 16 tiles along N where a pair shares A, else along M): the
    one whose wave touches the fewest A rows and B columns."""
    def usage(g):
        return g * block_n + cdiv(num_sms, g) * block_m if along_n else g * block_m + cdiv(num_sms, g) * block_n
    return min((8, 16), key=usage)


PEER_WIDTHS = tuple(range(16, 193, 16))
# The widths our kernel runs at DeepGEMM's speed (H100, session 42's tune state: at DeepGEMM's own
# tile, 16 / 32 / 64 / 128 columns and 128 x 192 ran 1.00-1.05x the best measured config, 48 / 80 /
# 96 columns 1.1-1.5x: those straddle two Bs rows at 64-row tiles). 192 only at 128 rows (64 x 192
# was never measured). MODEL_WIDTHS[block_m] is what the fallback model (Dense.model) chooses among.
MODEL_WIDTHS = {64: (16, 32, 64, 128), 128: (16, 32, 64, 128, 192), 256: (16, 32, 64, 128)}


def peer_tile(m: int, n: int, k: int, num_sms: int = DEFAULT_NUM_SMS, widths: dict | None = None) -> tuple:
    """(block_m, block_n, pair_m, pair_n) as DeepGEMM's model picks them for a dense bf16 GEMM:
    pair_m = 2 pairs two row tiles sharing B, pair_n = 2 two column tiles sharing A. ``widths``
    ({block_m: widths}) restricts the widths per row count (Dense.model); DeepGEMM's own by default."""
    best, best_cycles = None, None
    for pair_m, pair_n in ((1, 1), (1, 2), (2, 1)):
        if num_sms % (pair_m * pair_n):
            continue
        for block_m in (64, 128, 256):
            for block_n in (widths[block_m] if widths else PEER_WIDTHS):
                if block_n > 128 and block_n % (block_n - 128) and 128 % (block_n - 128):
                    continue
                if block_m > 128 and block_n > 128:
                    continue
                stages = _peer_stages(block_m, block_n, k)
                if stages < 3 or (block_m * block_n < 128 * 192 and stages < 4):
                    continue
                cycles = _peer_cycles(m, n, k, block_m, block_n, pair_m, pair_n, num_sms)
                if best is None or cycles < best_cycles:       # the first of equals, as DeepGEMM's loop
                    best, best_cycles = (block_m, block_n, pair_m, pair_n), cycles
    return best


def _peer_layout(tile: tuple, num_sms: int) -> tuple:
    """(block_m, block_n, cluster, multicast_a, group) of a peer_tile result: a pair sharing A
    (pair_n = 2) or B (pair_m = 2), and DeepGEMM's raster (along N only where a pair shares A, its
    kIsMulticastOnA; else along M)."""
    block_m, block_n, pair_m, pair_n = tile
    cluster, share_a = (2, 1) if pair_n == 2 else ((2, 0) if pair_m == 2 else (1, 0))
    return block_m, block_n, cluster, share_a, peer_group(block_m, block_n, bool(share_a), num_sms)


@dataclass(frozen=True)
class Dense(Candidate):
    """block_m x block_n tiles, ``stages`` ring buffers, ``cluster`` CTAs per pair (1 or 2) sharing
    A (``multicast_a``) or B, tiles rastered in groups of ``group`` along N (sharing A) or M;
    ``two_accum``: one-wave tiles alternate two wgmma accumulators (block kb issued before block
    kb - 1 is promoted; forced only, not yet measured)."""

    variant = "sm90_fp8_gemm_dense"
    block_m: int = 128
    block_n: int = 128
    stages: int = 5
    cluster: int = 1
    multicast_a: int = 1
    group: int = 8
    two_accum: int = 0

    def registers_ok(self) -> bool:
        """The math threads' accumulator registers fit: one wgmma accumulator and a sum per wave,
        block_n / 2 floats each, at most 192. NOTES: nvcc 13.0 compiled 256 x 128 (192 floats)
        without spills and 128 x 256 with them; 128 x 192 spilled until the K loop's descriptors
        were built as register pairs and its unreachable runtime-`former` copy went (session 40;
        tests/test_kernels_compile.py holds every configuration)."""
        waves = 2 if self.block_m == 256 else 1
        return (1 + waves + self.two_accum) * self.block_n // 2 <= 192

    def two_accum_ok(self) -> bool:
        """Two accumulators only on one-wave tiles (64 or 128 rows) inside one Bs row (the kernel's
        static_assert: with straddling widths its wholly unrolled loop spilled), below 16 stages
        (nvcc 13.0 spilled 64 x 16 and 64 x 32 at 16 stages and K = 4096, not at 15) and not
        64 x 128 (it spilled there at 8 stages, K = 4096; 128 x 128 does not)."""
        return self.two_accum in (0, 1) and (not self.two_accum or (
            self.block_m != 256 and 128 % self.block_n == 0 and self.stages < 16
            and (self.block_m == 128 or self.block_n < 128)))

    @property
    def threads(self) -> int:
        return threads(self.block_m)

    def staging_bytes(self, out_dtype: str, tma_store: bool) -> int:
        return self.block_m * self.block_n * OUT_BYTES[out_dtype] if tma_store else 0

    def smem_bytes(self, out_dtype: str = "bfloat16", k: int = 4096, tma_store: bool = True,
                   sfa_k_major: bool = True, sfa_flat: bool = False, grouped: bool = False,
                   num_groups: int | None = None) -> int:
        """The kernel's layout: alignment slack, the A / B ring, the staging of every (warpgroup,
        wave), each stage's As column (or K-major window: the whole K where flat, sfa_window_for's
        otherwise), two tiles' two Bs rows, the barriers. is_valid checks the windowed K-major
        form of the window of 8, the largest but for the wide window, which sfa_window_for takes
        only where it fits (grouped: with ``num_groups``' prefix; without it, the window of 8)."""
        window = (cdiv(k, BLOCK_K) if sfa_flat else self.sfa_window_for(k, out_dtype, grouped, num_groups)) \
            if sfa_k_major else 0
        return self._smem_bytes(out_dtype, k, tma_store, window)

    def sfa_window_for(self, k: int, out_dtype: str = "bfloat16", grouped: bool = False,
                       num_groups: int | None = None) -> int:
        """The K-major As window in K blocks: a wide one (SFA_WIDE_WINDOW_SWITCH: 32, else 16) where
        K / 128 is a multiple of it, the tile has 64 or 128 rows and the layout with it fits with
        the staging (so that the store's choice does not change the window) and, grouped, the
        prefix of ``num_groups`` groups (None: the window of 8, for callers that do not know the
        count); else sfa_window(K)."""
        extra = 0 if not grouped else None if num_groups is None else prefix_bytes(num_groups)
        if SFA_WIDE_WINDOW_SWITCH and SFA_WINDOW_FORCED == 0 and self.block_m <= 128 and extra is not None:
            for w in SFA_WIDE_WINDOWS:
                if (cdiv(k, BLOCK_K) % w == 0
                        and self._smem_bytes(out_dtype, k, True, w) + extra <= MAX_SMEM_PER_BLOCK):
                    return w
        return sfa_window(k)

    def _smem_bytes(self, out_dtype: str, k: int, tma_store: bool, window: int) -> int:
        """smem_bytes with the As window (0: the M-major column per stage) named."""
        kb = cdiv(k, BLOCK_K)
        sfb = -(-(2 * 2 * kb * 4) // 16) * 16
        sfa = self.block_m * 4 * (sfa_slots(self.stages, window, k) * window if window else self.stages)
        return (1024 + self.stages * (self.block_m + self.block_n) * BLOCK_K
                + self.staging_bytes(out_dtype, tma_store) + sfa + sfb + BARRIER_BYTES * self.stages)

    def store_swizzle(self, out_dtype: str) -> int:
        """The staging's chunk row bytes and the C map's swizzle (the kernel's kStoreSwizzle): 128
        where a tile row is whole 128-byte chunks, 64 where 64-byte ones (96 bf16 columns:
        DeepGEMM's 64B swizzle), else 0 (rows of 16 / 32 bytes: one unswizzled box)."""
        row = self.block_n * OUT_BYTES[out_dtype]
        return 128 if row % 128 == 0 else 64 if row % 64 == 0 else 0

    def store_ok(self, out_dtype: str) -> bool:
        """Whether this width can use the TMA-store staging: rows of whole 128-byte chunks, with
        STORE_64B_SWITCH of 64-byte chunks (64B-swizzled), with STORE_NARROW_SWITCH rows of 16 or
        32 bytes (one unswizzled box)."""
        row = self.block_n * OUT_BYTES[out_dtype]
        return (row % 128 == 0 or (STORE_64B_SWITCH and row % 64 == 0)
                or (STORE_NARROW_SWITCH and row in NARROW_ROWS))

    def _store_map(self, out_dtype: str) -> dict:
        """The Plan's C-map arguments: the swizzled chunk, or the narrow box (its columns)."""
        swz = self.store_swizzle(out_dtype)
        return {"store_swizzle": swz} if swz else {"store_box": self.block_n}

    def is_valid(self, desc: GemmDesc) -> bool:
        return (desc.shape_ok() and desc.out_dtype != "float32" and self.block_m in BLOCK_MS
                and width_ok(self.block_n) and self.registers_ok() and self.stages >= 2 and self.cluster in (1, 2)
                and self.multicast_a in (0, 1) and self.group >= 1 and self.two_accum_ok() and (self.cluster == 1 or self.group % 2 == 0)
                and self.smem_bytes(desc.out_dtype, desc.k, False) <= MAX_SMEM_PER_BLOCK)

    def label(self) -> str:
        # the raster's direction: pairs name what they share; alone, "gM" groups along M (share B)
        pair = f" c2{'A' if self.multicast_a else 'B'}" if self.cluster == 2 else ""
        along = "M" if self.cluster == 1 and not self.multicast_a else ""
        return (f"dense {self.block_m}x{self.block_n} s{self.stages}{pair} g{along}{self.group}"
                f"{' 2acc' if self.two_accum else ''}")

    def template_args(self, n: int, k: int, out_dtype: str, tma_store: bool, sfa_k_major: bool = False,
                      grouped: bool = False, sfa_flat: bool = False, num_groups: int | None = None,
                      window: int | None = None) -> tuple:
        """<BLOCK_M, BLOCK_N, kNumStages, kShapeN, kShapeK, kOutType, kTmaStore, kCluster,
        kMulticastA, kGroup[, kTwoAccum[, kSfaKMajor, kGrouped, kSfaWindowK]]> (the defaulted last
        ones named only where needed; K-major As names its window, K / 128 where flat; ``window``:
        the plan's, which its As map takes too, else computed here)"""
        head = (self.block_m, self.block_n, self.stages, n, k, KERNEL_TYPE_IDS[out_dtype], FLAG[tma_store],
                self.cluster, FLAG[bool(self.multicast_a)], self.group)
        if grouped or sfa_k_major:
            if window is None:
                window = cdiv(k, BLOCK_K) if sfa_flat else self.sfa_window_for(k, out_dtype, grouped, num_groups)
            tail = (FLAG[bool(self.two_accum)], "true", FLAG[grouped], window)
            # kSfaFlatWide: flat where a window could read it (K / 128 = 4 or 8; FLAT_WIDE_SWITCH)
            return head + tail + (("true",) if sfa_flat and window % 4 == 0 else ())
        return head + ("true",) if self.two_accum else head

    def plan(self, p, ldc: int, out_aligned: bool) -> Plan:
        # M-major where the caller's As is (no window: a quarter of the scale bytes), else K-major.
        k_major = not m_major_as_ok(p)
        if k_major and not (K_MAJOR_SWITCH and k_major_as_ok(p)):
            raise ValueError("config Dense reads a_scale by TMA: it must be K-major with unit K stride, a "
                             "16-byte aligned base and row stride (when packed: K / 128 a multiple of 4, or at "
                             "most 8), or "
                             "M-major (strides (1, >= M) in elements, 16-byte aligned base and column stride), "
                             "(the K-major form is off: FP8GEMM_DENSE_K_MAJOR=0) "
                             "as fp8gemm.quantize_per_token_group(..., m_major_scales=True) writes it")
        flat = k_major and sfa_flat(p)
        # the As window once, for the template and the map alike (the whole K where flat)
        window = (cdiv(p.k, BLOCK_K) if flat else self.sfa_window_for(p.k, p.out_dtype)) if k_major else None
        store, smem = self._store(p, ldc, out_aligned, lambda st: self.smem_bytes(p.out_dtype, p.k, st, k_major, flat))
        prelude = self.prelude()
        kern = compiler.get_kernel(p.device, self.variant,
                                   self.template_args(p.n, p.k, p.out_dtype, store, k_major, sfa_flat=flat,
                                                      window=window), smem,
                                   prelude)
        tmap_a = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda,
                                   a_box_rows(p.m, self.block_m, SHORT_A_BOX_PRELUDE in prelude))
        tmap_b = tma.encode_2d_fp8(p.b_ptr, p.n, p.k, p.ldb, self.block_n)
        tiles = cdiv(p.m, self.block_m) * cdiv(p.n, self.block_n)
        check_units(tiles, f"M = {p.m}, N = {p.n}")
        return Plan(p, kern, self._grid(p, tiles), self.threads, smem, ldc,
                    gemm_args(tmap_a, tmap_b, p, ldc)
                    + (("desc", k_major_as_map(p, sfa_box_rows(p.m, self.block_m, SHORT_SFA_BOX_PRELUDE in prelude, flat),
                                               flat, window)
                        if k_major else m_major_as_map(p, self.block_m)),)
                    + NO_GROUPS, tma_store=store, num_tiles=tiles,
                    **self._store_map(p.out_dtype))

    def _store(self, p, ldc: int, out_aligned: bool, smem_for) -> tuple:
        """(TMA store, shared memory bytes): the staging where the width and C's layout allow it
        and it fits beside this ring (smem_for(store) -> bytes), else direct stores."""
        swz = self.store_swizzle(p.out_dtype)
        store = self.store_ok(p.out_dtype) and tma_store_ok(p.n, self.block_n, OUT_BYTES[p.out_dtype], ldc,
                                                           out_aligned, narrow=swz == 0, chunk=swz or 128)
        smem = smem_for(store)
        if smem > MAX_SMEM_PER_BLOCK:      # the staging does not fit beside this ring: store directly
            store, smem = False, smem_for(False)
        return store, smem

    def _grid(self, p, tiles: int) -> int:
        """At most one CTA per SM; pairs whole (a CTA of a pair may find no tile)."""
        sms = sm_count(p.device)
        grid = min(tiles, sms)
        if self.cluster == 2:
            grid = min(grid + grid % 2, sms - sms % 2)
        return grid

    def grouped_ok(self) -> str:
        """Why this config cannot run a grouped GEMM ("" where it can): the K-major As window must
        be switched on (a group's first row is any row; an M-major As box cannot start there). A
        pair sharing B multicasts it only where its two row tiles are one group's (the kernel)."""
        if not K_MAJOR_SWITCH:
            return "the grouped dense mode reads As K-major, which FP8GEMM_DENSE_K_MAJOR=0 turns off"
        return ""

    def prelude(self) -> str:
        """The source prelude of this tile's kernel: the implicit-cluster form for an unpaired tile
        under IMPLICIT_CLUSTER_SWITCH, the elected producer under ELECT_PRODUCER_SWITCH, the short
        A box under SHORT_A_BOX_SWITCH (the plan's A map follows the prelude it compiled with), the Bs
        load ahead under SFB_AHEAD_SWITCH, idle warpgroups skipped under SKIP_IDLE_WG_SWITCH, the last
        row tile's A box moved up under A_BOX_SHIFT_SWITCH, the short As window under
        SHORT_SFA_BOX_SWITCH."""
        return ((IMPLICIT_CLUSTER_PRELUDE if IMPLICIT_CLUSTER_SWITCH and self.cluster == 1 else "")
                + (ELECT_PRODUCER_PRELUDE if ELECT_PRODUCER_SWITCH else "")
                + (SHORT_A_BOX_PRELUDE if SHORT_A_BOX_SWITCH else "")
                + (SFB_AHEAD_PRELUDE if SFB_AHEAD_SWITCH else "")
                + (SKIP_IDLE_WG_PRELUDE if SKIP_IDLE_WG_SWITCH else "")
                + (A_BOX_SHIFT_PRELUDE if A_BOX_SHIFT_SWITCH else "")
                + (SHORT_SFA_BOX_PRELUDE if SHORT_SFA_BOX_SWITCH else ""))

    def grouped_smem_bytes(self, out_dtype: str, num_groups: int, k: int = 4096, tma_store: bool = True) -> int:
        """The plain layout (As K-major) and the tile prefix after the barriers."""
        return self.smem_bytes(out_dtype, k, tma_store, True, grouped=True, num_groups=num_groups) + prefix_bytes(num_groups)

    def plan_grouped(self, gp, ldc: int, out_aligned: bool, precise_fp32: bool = True) -> Plan:
        """The grouped mode (kGrouped): A and C all groups' rows, B the groups' weights stacked
        [G * N, K], As K-major read through the 4-block window (k_major_as_ok), Bs one block per
        group sb_stride_g apart. The counts stay on the GPU: a grid of at most one CTA per SM over
        the most row tiles the groups can have. Whole tiles store by TMA, a group's partial last
        tile directly (the kernel's epilogue). FP32 out only with precise_fp32=False (fp8gemm.moe's
        L1 intermediate): the kernel promotes per 128-wide K block."""
        p = gp.gemm
        if p.out_dtype == "float32" and precise_fp32:
            raise ValueError(f"config {self.label()}: promotes per 128-wide K block; fp32 output needs precise_fp32=False")
        why = self.grouped_ok()
        if why:
            raise ValueError(f"config {self.label()}: {why}")
        if not grouped_as_ok(p):
            raise ValueError("config Dense, grouped: a_scale must be K-major with unit K stride, a 16-byte aligned "
                             "base and row stride (K / 128 a multiple of 4 when packed)")
        store, smem = self._store(p, ldc, out_aligned,
                                  lambda st: self.grouped_smem_bytes(p.out_dtype, gp.num_groups, p.k, st))
        window = self.sfa_window_for(p.k, p.out_dtype, True, gp.num_groups)
        kern = compiler.get_kernel(p.device, self.variant,
                                   self.template_args(p.n, p.k, p.out_dtype, store, True, True, num_groups=gp.num_groups,
                                                      window=window),
                                   MAX_SMEM_PER_BLOCK, self.prelude())
        tmap_a = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda, self.block_m)
        tmap_b = tma.encode_2d_fp8(p.b_ptr, gp.num_groups * p.n, p.k, p.ldb, self.block_n)
        tiles = token_tiles(p.m, self.block_m, gp) * cdiv(p.n, self.block_n)
        check_units(tiles, f"M = {p.m}, N = {p.n}, G = {gp.num_groups}")
        return Plan(p, kern, self._grid(p, tiles), self.threads, smem, ldc,
                    # a window always: the grouped kernel is compiled for one (template_args' sfa_flat=False)
                    gemm_args(tmap_a, tmap_b, p, ldc) + (("desc", k_major_as_map(p, self.block_m, flat=False, window=window)),)
                    + group_args(gp),
                    tma_store=store, num_tiles=tiles,
                    **self._store_map(p.out_dtype))

    @classmethod
    def fallback(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS, reason: str = "") -> Dense:
        """DeepGEMM's large-M choice: 256 x 128 in pairs sharing A from 1024 rows, else 128 x 128."""
        if desc.m >= 1024:
            return cls(256, 128, 3, 2, 1, 8, reason=reason or "dense: 256 x 128, pairs share A")
        return cls(128, 128, 5, 1, 1, 8, reason=reason or "dense: 128 x 128")

    @classmethod
    def model(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS) -> Dense | None:
        """The shape-based model's dense choice for a shape no table entry covers, or None where
        the model keeps the other kernels (M <= 64, fp32 out, K / 128 not a multiple of 4: our
        quantizer's packed K-major As is then not TMA-readable). DeepGEMM's tile model over the
        widths our kernel runs at its speed (MODEL_WIDTHS), its pairs and raster, the most stages
        that fit, two accumulators where the tile allows them, and unpaired tiles below 1024 rows
        rastered along N (groups of 8). NOTES (bench/NOTES.md, session 42, H100 tune state, the
        trace's 94 shapes from M = 65 with K / 128 a multiple of 4): this choice ran 1.06 / 1.03 /
        1.02x the tuned best at M = 65-256 / 257-1023 / >= 1024 where the general / wg3 fallback
        ran 1.14 / 1.15 / 1.11x."""
        # the flat As (K / 128 <= 8, not a multiple of 4) only through the tuner until the
        # model's tiles are measured there
        if not K_MAJOR_SWITCH or desc.m <= 64 or desc.out_dtype == "float32" or cdiv(desc.k, BLOCK_K) % 4:
            return None
        block_m, block_n, cluster, share_a, group = _peer_layout(
            peer_tile(desc.m, desc.n, desc.k, num_sms, MODEL_WIDTHS), num_sms)
        if cluster == 1 and desc.m < 1024:
            share_a, group = 1, 8
        why = (f"model: DeepGEMM's tile model over widths {', '.join(map(str, MODEL_WIDTHS[block_m]))} "
               f"at {block_m} rows{', pairs share ' + ('A' if share_a else 'B') if cluster == 2 else ''}")
        for two in (1, 0):
            c = cls._most_stages(desc, cls(block_m, block_n, 2, cluster, share_a, group, two, reason=why))
            if c is not None:
                return c
        return None

    @staticmethod
    def _most_stages(desc: GemmDesc, c: Dense) -> Dense | None:
        """``c`` with the most stages (at most 16) that fit beside the staging its width stores
        through, on a K-major As, and are valid; None where none are. NOTES: sized beside the 128B
        staging only, 128 x 96 took 7 stages on a K-major As, the 24 KiB staging no longer fit, and
        the plan stored directly: 1.43x DeepGEMM's time at 1024 x 1536 x 1024 on the H100, against
        1.03x on an M-major As, where it fit (session 42)."""
        staged = c.store_ok(desc.out_dtype)
        return next((s for s in (replace(c, stages=n) for n in range(16, 1, -1))
                     if s.smem_bytes(desc.out_dtype, desc.k, staged, True) <= MAX_SMEM_PER_BLOCK and s.is_valid(desc)),
                    None)

    @classmethod
    def tuner_candidates(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS) -> list:
        """The configurations measured at DeepGEMM's speed or better (bench/NOTES.md, session 36),
        by M: 256 x 128 pairs (and 128 x 128 two-accumulator pairs) from 512 rows, 128-row tiles
        (one and two accumulators) and 64 x 64 (one accumulator and 8 stages, two and 13) from 65,
        DeepGEMM's own tile alone up to 64. Only
        where our quantizer's packed K-major As is TMA-readable (K / 128 a multiple of 4,
        k_major_as_ok): the table is tuned on that layout, and the dispatcher falls back to the
        general kernel where a caller's As is neither (fp8gemm/api.py)."""
        if not K_MAJOR_SWITCH or desc.out_dtype == "float32" or not k_major_kb_ok(cdiv(desc.k, BLOCK_K)):
            return []
        if desc.m <= 64:
            # DeepGEMM's own tile there (64 rows, a narrow width; one M tile, so one raster):
            # it ran 1.04-1.20x faster than our general / swap-AB / gemv picks at M = 24-64 on 16
            # trace shapes (bench/results/h100_session42.csv), so the tuner measures it.
            return [c for c in cls.peer_configs(desc, num_sms) if not c.multicast_a or c.cluster == 2]
        out = []
        if desc.m >= 512:
            out += [cls(256, 128, 3, 2, 1, 16), cls(256, 128, 3, 2, 1, 8), cls(256, 128, 3, 2, 0, 8)]
            # The two-accumulator 128 x 128 in pairs (multicast of the shared operand): session 48
            # measured the unpaired one at the fewest cycles per GEMM but a 5-7% lower SM clock than
            # DeepGEMM's 256 x 128 pairs at 8192-16384 x 8192 x 4096 (H100, the board at its power
            # limit); a pair reads a quarter fewer operand bytes from L2. Not yet measured.
            out += [cls(128, 128, 5, 2, 1, 16, 1), cls(128, 128, 5, 2, 0, 16, 1)]
        out += [cls(128, 128, 5, 1, 1, 8, 1), cls(128, 128, 5, 1, 1, 8)]
        if desc.m <= 1024:
            out += [cls(64, 64, 8, 1, 1, 8), cls(128, 64, 6, 1, 1, 8)]
            # 64 x 64 with two accumulators and 13 stages: the fastest forced tile at 158-256 x 1536 x
            # 4096 (H200, session 49, lab/a_box_shift_ab.py: 6.9-7.7 us against 7.7-7.9 for 64 x 64
            # s8 and 8.4-8.6 for DeepGEMM's 64 x 48, DeepGEMM 7.8-8.0), where DeepGEMM's model picks
            # 64 x 48 and so peer_configs did not offer it; h100.json's pick at 214 x 1536 x 1024.
            out += [cls(64, 64, 13, 1, 1, 8, 1)]
        return out + [c for c in cls.peer_configs(desc, num_sms) if c not in out]

    @classmethod
    def peer_configs(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS) -> list:
        """Our kernel at DeepGEMM's tile (peer_tile) and raster (peer_group) with the most stages
        that fit beside the staging on K-major As (at most 16), and with two accumulators where a
        one-wave tile allows them; none where that tile is past what our kernel holds."""
        block_m, block_n, cluster, share_a, group = _peer_layout(peer_tile(desc.m, desc.n, desc.k, num_sms), num_sms)
        out = []
        for two in (0, 1):
            c = cls._most_stages(desc, cls(block_m, block_n, 2, cluster, share_a, group, two))
            if c is not None:
                out.append(c)
                # NOTES (bench/NOTES.md session 41, H200): an unpaired tile rastered along N (ours,
                # groups of 8) ran 1.08x / 0.99x DeepGEMM's time at 64 x 96 / 64 x 128 where its own
                # along-M raster ran 1.22x / 1.15x: the tuner measures both.
                if cluster == 1:
                    out.append(replace(c, multicast_a=1, group=8))
        return out
