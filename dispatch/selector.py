"""Selection: a tuned table per GPU (plain JSON beside this file), then a shape-based fallback.

A ``Candidate`` names a variant (the kernel file stem in kernels_cu/, which is also the compile
cache key, the bench CSV row and the test id) and its compile-time meta-parameters. Each variant
has ``is_valid(desc, cand)`` and ``smem_bytes(cand)``; ``select`` returns the table's entry for the
nearest tuned M of the same (N, K) when one lies within a factor of 2 of M and is valid, else the
fallback's choice. The table comes from ``fp8gemm-tune`` (bench/tune.py).

Set FP8GEMM_PRINT_CONFIG=1 to print each new decision once.
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..dtypes import OUT_BYTES
from ..hw import MAX_SMEM_PER_BLOCK, SCALE_BLOCK

DEFAULT_NUM_SMS = 132         # H100 SXM / H200; the launcher passes the device's own count

GENERAL = "sm90_fp8_gemm_general"


@dataclass(frozen=True)
class GemmDesc:
    m: int
    n: int
    k: int
    out_dtype: str = "bfloat16"


@dataclass(frozen=True)
class Candidate:
    variant: str
    block_n: int = 128
    stages: int = 6
    group_m: int = 8
    splits: int = 1          # K splits per output tile (deterministic in-kernel reduction)
    swap_ab: bool = False    # compute C^T = B A^T: weights on wgmma M, tokens (block_n) on wgmma N
    block_m: int = 128       # tile rows (short-K: 64 or 128; the general kernel: always 128)
    reason: str = field(default="", compare=False)

    def key(self) -> tuple:
        return (self.variant, self.block_n, self.stages, self.group_m, self.splits, self.swap_ab,
                self.block_m)


# ---- variant: sm90_fp8_gemm_general ------------------------------------------------------------

GENERAL_BLOCK_M = 128
GENERAL_BLOCK_K = 128
GENERAL_BLOCK_NS = (8, 16, 32, 64, 128)     # must divide 128: a tile sits in one Bs row
SWAP_BLOCK_NS = (8, 16, 32, 64)             # token tiles of swap-AB (wgmma N)
SWAP_FALLBACK_BLOCK_NS = (8, 16, 32)        # the fallback's choices (64 measured slower: NOTES.md)
SWAP_MAX_M = 64                             # the fallback swaps A and B up to this many tokens




def general_staging_bytes(block_n: int, out_dtype: str, swap_ab: bool = False) -> int:
    """Shared memory of the TMA-store epilogue (two warpgroups x 64 rows x block_n outputs);
    0 where a tile row is not a whole number of 128-byte swizzle chunks, or under swap-AB
    (direct stores)."""
    row_bytes = block_n * OUT_BYTES[out_dtype]
    if swap_ab:
        return 0
    return 0 if row_bytes % 128 else 2 * 64 * row_bytes


def general_smem_bytes(c: Candidate, out_dtype: str = "bfloat16") -> int:
    per_stage = GENERAL_BLOCK_M * GENERAL_BLOCK_K + c.block_n * GENERAL_BLOCK_K
    return (1024 + c.stages * per_stage + general_staging_bytes(c.block_n, out_dtype, c.swap_ab)
            + 2 * 8 * c.stages + 16)


GENERAL_MAX_SPLITS = 16


def general_is_valid(desc: GemmDesc, c: Candidate) -> bool:
    block_ns = SWAP_BLOCK_NS if c.swap_ab else GENERAL_BLOCK_NS
    return (c.variant == GENERAL and c.block_n in block_ns and c.stages >= 2 and c.block_m == GENERAL_BLOCK_M
            and c.group_m >= 1 and general_smem_bytes(c, desc.out_dtype) <= MAX_SMEM_PER_BLOCK
            and 1 <= c.splits <= GENERAL_MAX_SPLITS
            and desc.m >= 1 and desc.n >= 1 and desc.k >= 16 and desc.k % 16 == 0)


GENERAL_MAX_STAGES = 6


def _general_splits(tiles: int, k_blocks: int, num_sms: int) -> int:
    """Split K when the tiles cannot fill half the SMs: each split keeps >= 2 K blocks, and the
    units (tiles x splits) fill at most one wave."""
    if 2 * tiles > num_sms or k_blocks < 4:
        return 1
    return max(1, min(k_blocks // 2, num_sms // tiles, GENERAL_MAX_SPLITS))


# Time model constants (H200, measured or fitted with tools/sweep_splits.py; see bench/NOTES.md).
HBM_BYTES_PER_US = 4.3e6      # device copy bandwidth, bytes read + written
SM_BYTES_PER_US = 95e3        # one SM's TMA stream when few SMs share HBM (fitted)
SM_FLOPS_PER_US = 11.26e6     # FP8 dense peak / 132 SMs
SPLIT_FIXED_US = 1.0          # publish partial, barrier + acq_rel atomic, final re-read (fitted before v14)
SPLIT_EACH_US = 0.05          # each further split the last CTA reads (refitted, session 9: 16 in flight)


def general_cost(rows: int, cols: int, k: int, block_n: int, splits: int, num_sms: int) -> float:
    """Estimated microseconds (less the fixed launch cost) of a rows x cols tile space (rows = M,
    or N under swap-AB) cut into 128 x block_n tiles and `splits` K ranges: the slowest of HBM
    (unique bytes), one SM's operand stream (re-reads of a shared operand hit L2 but still pass
    through the SM) and one SM's tensor cores, plus the split-K overheads (fixed, per split, and
    the partial tiles written and re-read)."""
    k_blocks = -(-k // GENERAL_BLOCK_K)
    units = -(-rows // GENERAL_BLOCK_M) * -(-cols // block_n) * splits
    waves = -(-units // num_sms)
    kb_per_unit = -(-k_blocks // splits)
    unit_bytes = kb_per_unit * (GENERAL_BLOCK_M + block_n) * GENERAL_BLOCK_K
    unit_flops = kb_per_unit * 2.0 * GENERAL_BLOCK_M * block_n * GENERAL_BLOCK_K
    unique = (rows + cols) * k + 2 * rows * cols
    t = max(unique / HBM_BYTES_PER_US, waves * unit_bytes / SM_BYTES_PER_US,
            waves * unit_flops / SM_FLOPS_PER_US)
    if splits > 1:
        partial = min(rows, GENERAL_BLOCK_M) * min(block_n, cols) * 4
        t += SPLIT_FIXED_US + SPLIT_EACH_US * (splits - 1)
        t += (waves * partial + 2 * splits * partial) / SM_BYTES_PER_US
    return t


def _best_tiling(rows: int, cols: int, k: int, block_ns, num_sms: int):
    """(cost, block_n, tiles, splits) of least cost over block_n and split counts."""
    k_blocks = -(-k // GENERAL_BLOCK_K)
    best = None
    for block_n in block_ns:
        tiles = -(-rows // GENERAL_BLOCK_M) * -(-cols // block_n)
        max_splits = _general_splits(tiles, k_blocks, num_sms)
        for splits in range(1, max_splits + 1):
            cost = general_cost(rows, cols, k, block_n, splits, num_sms)
            if best is None or cost < best[0] * 0.999:
                best = (cost, block_n, tiles, splits)
    return best


def _stages(block_n: int, out_dtype: str, swap_ab: bool) -> int:
    per_stage = GENERAL_BLOCK_M * GENERAL_BLOCK_K + block_n * GENERAL_BLOCK_K
    free = MAX_SMEM_PER_BLOCK - 1024 - 16 - general_staging_bytes(block_n, out_dtype, swap_ab)
    return max(2, min(free // (per_stage + 16), GENERAL_MAX_STAGES))


def _group_m(desc: GemmDesc, swap_ab: bool) -> int:
    """Raster group (m-blocks per n-block sweep). NOTES: from the trace-wide tuner run (session 4,
    bench/NOTES.md): group 1 won 78 of 108 swap-AB shapes (by up to 27% at M = 16-32, K = 4096)
    and 41 of 60 plain shapes with M >= 1024 (by 1-6%), except at N = 8192 with K >= 1024, where
    8-16 won; group 8 won every plain shape with M < 1024."""
    if swap_ab:
        return 1
    return 1 if desc.m >= 1024 and (desc.n <= 4096 or desc.k <= 256) else 8


def general_fallback(desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS, allow_wg3: bool = True) -> Candidate:
    """Up to 64 tokens: swap-AB; otherwise the plain orientation. In both, the tiling (block_n,
    splits) of least estimated time (general_cost; ties: the first tried). Then as many
    stages as shared memory holds, at most 6 (independent of K: one instantiation serves all K),
    and the raster group of _group_m. With ``allow_wg3``, from M = WG3_MIN_M on (bf16 / fp16
    out), the three-warpgroup kernel where its estimate (wg3_cost) is at most the best tiling's.
    """
    k_blocks = -(-desc.k // GENERAL_BLOCK_K)
    if desc.m <= SWAP_MAX_M:
        _, block_n, tiles, splits = _best_tiling(desc.n, desc.m, desc.k, SWAP_FALLBACK_BLOCK_NS, num_sms)
        stages = _stages(block_n, desc.out_dtype, True)
        return Candidate(GENERAL, block_n, stages, _group_m(desc, True), splits, True,
                         reason=f"fallback: swap-AB (M={desc.m} <= {SWAP_MAX_M}), token tile {block_n}, "
                                f"splits={splits} for {tiles} tiles x {k_blocks} K blocks on {num_sms} SMs")
    block_ns = (16,) if desc.n <= 16 else (128, 64, 32, 16)
    cost, block_n, tiles, splits = _best_tiling(desc.m, desc.n, desc.k, block_ns, num_sms)
    if allow_wg3 and desc.m >= WG3_MIN_M and desc.out_dtype != "float32":
        cost3 = wg3_cost(desc.m, desc.n, desc.k, num_sms)
        if cost3 <= cost:         # ties (HBM-bound at short K): measured faster, its epilogues overlap
            return wg3_candidate(desc, f"fallback: wg3, 192 x 128 tiles estimated {cost3:.1f} us against "
                                       f"{cost:.1f} us for the general kernel's 128 x {block_n}")
    stages = _stages(block_n, desc.out_dtype, False)
    return Candidate(GENERAL, block_n, stages, _group_m(desc, False), splits,
                     reason=f"fallback: block_n={block_n}, splits={splits} for {tiles} tiles x "
                            f"{k_blocks} K blocks on {num_sms} SMs, stages={stages}")


# ---- grouped GEMM (MoE): the general kernel's grouped mode --------------------------------------

GROUPED_MAX_GROUPS = 8192


def grouped_smem_bytes(c: Candidate, out_dtype: str, num_groups: int) -> int:
    """The kernel's shared memory plus the groups' tile prefix (num_groups + 1 words). The
    three-warpgroup kernel's grouped mode stores directly: no staging."""
    if c.variant == WG3:
        base = 1024 + c.stages * (WG3_BLOCK_M + c.block_n) * GENERAL_BLOCK_K + 2 * 8 * c.stages
    else:
        base = general_smem_bytes(c, out_dtype)
    return base + -(-4 * (num_groups + 1) // 16) * 16


GROUPED_SWAP_MAX_ROWS = 32    # token tiles of the grouped swap-AB mode: 8, 16 or 32 rows
# 192-row tiles of the three-warpgroup kernel where the rows-per-group estimate lies in (lo, hi]
# (the estimate is twice the mean, grouped._group_estimate: a mean of 120-165 rows). NOTES (session
# 11, tools/exp_moe_prefill.py --wg3): 1.07-1.34x at 129-192 rows per expert, 0.61-0.88x at 128
# and 256; Pro L1 at 8192 tokens (mean 128) 1.08x, Flash (mean 192) 0.88x. None: off.
GROUPED_WG3_ROWS = (240.0, 330.0)
# fp8gemm.moe: where the rows estimate lies in (lo, hi] (a mean of 100-225 rows per expert), both
# grouped kernels are launched for each GEMM and the routing kernel picks one from the real counts
# (moe_glue.cu, choice_costs); the other sees every group empty. NOTES session 12: the window
# alone cannot tell uniform routing (Pro at 8192 tokens 1.08x on 192-row tiles) from skewed routing
# with the same mean (0.91x). None: off (the window above decides).
MOE_CHOICE_ROWS = (200.0, 450.0)


def grouped_candidate(n: int, k: int, out_dtype: str, num_groups: int, rows_per_group: float | None = None,
                      active_groups: int | None = None, num_sms: int = DEFAULT_NUM_SMS,
                      precise_fp32: bool = True, wg3: bool | None = None) -> Candidate:
    """The tile of a grouped GEMM over ``num_groups`` weight matrices [N, K].

    ``rows_per_group``: about how many rows a non-empty group holds (the counts stay on the GPU,
    so this is an estimate; None: unknown, many). Up to 32 (decode): swap-AB, the group's weight
    rows on wgmma's 128-row side and its tokens on an 8/16/32-wide token tile, so no MMA row is
    wasted and the weights stream once; then K splits when the tiles of ``active_groups`` would
    leave over half the SMs idle (the plain kernel's rule). In GROUPED_WG3_ROWS: the
    three-warpgroup kernel's 192-row tiles (bf16 / fp16 out, or fp32 when not ``precise_fp32``).
    Otherwise 128-row token tiles and block_n 128 (the smallest tile holding N below that).
    ``wg3`` True / False: the 192-row tiles (where the output allows them) / never, whatever the
    estimate (fp8gemm.moe's device-side choice). Stages: as many as shared memory holds beside the
    tile prefix."""
    if not 1 <= num_groups <= GROUPED_MAX_GROUPS:
        raise ValueError(f"grouped GEMM takes 1..{GROUPED_MAX_GROUPS} groups; got {num_groups}")
    swap = rows_per_group is not None and rows_per_group <= GROUPED_SWAP_MAX_ROWS
    # The three-warpgroup kernel promotes per 128-wide K block only: fp32 out when not precise.
    in_window = (GROUPED_WG3_ROWS is not None and rows_per_group is not None
                 and GROUPED_WG3_ROWS[0] < rows_per_group <= GROUPED_WG3_ROWS[1])
    if (out_dtype != "float32" or not precise_fp32) and (in_window if wg3 is None else wg3):
        for stages in range(GENERAL_MAX_STAGES, 1, -1):
            c = Candidate(WG3, 128, stages, 8, 1, False, WG3_BLOCK_M,
                          reason=f"grouped: 192-row tiles (about {rows_per_group or 0:.3g} rows per group), stages={stages}")
            if grouped_smem_bytes(c, out_dtype, num_groups) <= MAX_SMEM_PER_BLOCK:
                return c
    splits = 1
    if swap:
        block_n = next(b for b in SWAP_BLOCK_NS if b >= rows_per_group)
        active = max(1, min(num_groups, active_groups or num_groups))
        tiles = active * -(-n // GENERAL_BLOCK_M)
        # NOTES: the plain kernel's rule (SMs half idle). Splitting 6 experts x 32 tiles in two
        # to even out 1.5 waves measured slower (flash L1 / L2 at one token: 34.8 / 23.1 us
        # against 31.3 / 17.9 unsplit; bench/NOTES.md v12).
        splits = _general_splits(tiles, -(-k // GENERAL_BLOCK_K), num_sms)
        why = (f"swap-AB, token tile {block_n} (about {rows_per_group:.3g} rows per group), "
               f"splits={splits} for about {tiles} tiles")
    else:
        block_n = next((b for b in GENERAL_BLOCK_NS if b >= n), GENERAL_BLOCK_NS[-1])
        why = f"block_n={block_n}"
    for stages in range(GENERAL_MAX_STAGES, 1, -1):
        c = Candidate(GENERAL, block_n, stages, 1 if swap else 8, splits, swap,
                      reason=f"grouped: {why}, stages={stages} beside a {num_groups}-group tile prefix")
        if grouped_smem_bytes(c, out_dtype, num_groups) <= MAX_SMEM_PER_BLOCK:
            return c
    raise AssertionError("unreachable: two stages and 8192 groups fit")


# The fused SwiGLU L1 of fp8gemm.moe (kernel template kSwiGLU): 128 token rows x (64 gate + 64 up)
# weight rows per stage, two sub-tiles per work unit, sub-tile 0's act values and row amax held in
# shared memory (34 floats per consumer thread: kernels_cu/swiglu_epilogue.cuh).
SWIGLU_ACT_COLS = 64                    # act columns per sub-tile: the B boxes' rows
SWIGLU_HOLD_BYTES = 2 * 128 * 34 * 4


def swiglu_smem_bytes(stages: int, num_groups: int) -> int:
    per_stage = GENERAL_BLOCK_M * GENERAL_BLOCK_K + 128 * GENERAL_BLOCK_K
    return (1024 + stages * per_stage + SWIGLU_HOLD_BYTES + 2 * 8 * stages + 16
            + -(-4 * (num_groups + 1) // 16) * 16)


def swiglu_candidate(num_groups: int) -> Candidate:
    """The fused L1's tile: block_n 128 (64 gate + 64 up), no splits, as many stages as fit."""
    for stages in range(GENERAL_MAX_STAGES, 1, -1):
        if swiglu_smem_bytes(stages, num_groups) <= MAX_SMEM_PER_BLOCK:
            return Candidate(GENERAL, 128, stages, 8, 1, False,
                             reason=f"fused SwiGLU L1: 128 x (64 gate + 64 up), stages={stages} beside the "
                                    f"act hold and a {num_groups}-group tile prefix")
    raise AssertionError("unreachable: two stages and 8192 groups fit")


# ---- variant: sm90_fp8_gemm_short_k -------------------------------------------------------------

SHORT_K = "sm90_fp8_gemm_short_k"
SHORT_K_MAX_K = 256                     # two 128-wide K blocks, both loaded at once
SHORT_K_BLOCK_MS = (64, 128)            # one or two consumer warpgroups
SHORT_K_BLOCK_NS = (16, 32, 64, 128)


def short_k_smem_bytes(c: Candidate, out_dtype: str = "bfloat16") -> int:
    """Both K blocks of A and B, the TMA-store staging of block_m / 64 warpgroups, 2 barriers
    (sized for K = 256; a K <= 128 launch leaves the second block unused)."""
    staging = general_staging_bytes(c.block_n, out_dtype) * c.block_m // GENERAL_BLOCK_M
    return 1024 + 2 * (c.block_m + c.block_n) * GENERAL_BLOCK_K + staging + 16


def short_k_is_valid(desc: GemmDesc, c: Candidate) -> bool:
    return (c.variant == SHORT_K and c.block_m in SHORT_K_BLOCK_MS and c.block_n in SHORT_K_BLOCK_NS
            and c.splits == 1 and not c.swap_ab
            and short_k_smem_bytes(c, desc.out_dtype) <= MAX_SMEM_PER_BLOCK
            and desc.m >= 1 and desc.n >= 1 and 16 <= desc.k <= SHORT_K_MAX_K and desc.k % 16 == 0)


SHORT_K_MAX_TILES_PER_SM = 8    # beyond this many 64 x 64 tiles per SM the persistent kernel wins
SHORT_K_MIN_TILES = 24          # narrower tiles below this many (more CTAs loading B at once)


def short_k_takes(desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS) -> bool:
    """K <= 256 and at most SHORT_K_MAX_TILES_PER_SM 64 x 64 tiles per SM. NOTES: from the K = 256
    tuner run of session 5 (bench/NOTES.md v11): short-K beat the general kernel, swap-AB
    included, on every trace shape up to 1056 such tiles (by 2-40%), and the persistent general
    kernel (epilogue overlapped with the next tile's loads) won from 1536 tiles up."""
    tiles = -(-desc.m // 64) * -(-desc.n // 64)
    return desc.k <= SHORT_K_MAX_K and tiles <= SHORT_K_MAX_TILES_PER_SM * num_sms


def short_k_fallback(desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS) -> Candidate:
    """64 x 64 tiles (narrower for N <= 32), halved in width (to 32, then 16) while fewer than
    SHORT_K_MIN_TILES. NOTES:
    64 x 64 won or came within 3% on 70 of the 88 K = 256 trace shapes; 64 x 16 won at N = 512
    with M <= 128 (by 2-17%); two-warpgroup tiles (128 rows) lost nearly everywhere
    (bench/NOTES.md v11)."""
    block_n = 64 if desc.n > 32 else (32 if desc.n > 16 else 16)      # no wider than N needs
    tiles = -(-desc.m // 64) * -(-desc.n // block_n)
    while tiles < SHORT_K_MIN_TILES and block_n > 16:
        block_n //= 2
        tiles = -(-desc.m // 64) * -(-desc.n // block_n)
    return Candidate(SHORT_K, block_n, 2, 1, 1, False, 64,
                     reason=f"fallback: short-K (K={desc.k} <= {SHORT_K_MAX_K}), tile 64x{block_n}: "
                            f"{tiles} tiles on {num_sms} SMs")


# ---- variant: sm90_fp8_gemm_gemv --------------------------------------------------------------
# Decode, M <= 16: one CTA per 16 weight rows over all of K (warp-level MMA, the K blocks shared by
# the CTA's warps, reduced in shared memory). Candidate fields: block_n = token tile (8: M <= 8,
# 16: M <= 16), block_m = 16 weight rows, group_m = warps per CTA, stages = K blocks per warp loaded
# at once.

GEMV = "sm90_fp8_gemm_gemv"
GEMV_ROWS = 16
GEMV_TOKEN_TILES = (8, 16)
GEMV_WARPS = (4, 8)
GEMV_UNROLLS = (1, 2, 4)


def gemv_smem_bytes(c: Candidate, out_dtype: str = "bfloat16") -> int:
    """Static shared memory only (the warps' partial sums): no dynamic bytes."""
    return 0


def gemv_is_valid(desc: GemmDesc, c: Candidate) -> bool:
    return (c.variant == GEMV and c.block_m == GEMV_ROWS and c.block_n in GEMV_TOKEN_TILES
            and c.group_m in GEMV_WARPS and c.stages in GEMV_UNROLLS and c.splits == 1 and not c.swap_ab
            and 1 <= desc.m <= c.block_n and desc.n >= 1 and desc.k >= 16 and desc.k % 16 == 0)


GEMV_MAX_M = 8                 # the fallback's rule (below); the table may pick it up to 16
GEMV_MAX_N = 4096
GEMV_MAX_MN = 16384


def gemv_takes(desc: GemmDesc) -> bool:
    """The fallback's choice of the decode kernel: K > 256, M <= 8, N <= 4096 and M * N <= 16384.
    NOTES: measured against the dispatcher's swap-AB / short-K picks (tools/exp_gemv.py, H200,
    session 10): 0.57-0.99x their time at M <= 4 and N <= 4096 with K >= 1024 (no split-K
    handshake), 0.6-0.98x at M = 8 up to N = 2048; slower at N = 8192 (1.02-1.48x: the TMA swap-AB
    stream wins when every SM has tiles), at M = 8 with N = 4096 (0.97-1.09x), at K = 256 (the
    short-K kernel, 1.04-1.2x) and mostly at M = 16."""
    return (desc.k > SHORT_K_MAX_K and desc.m <= GEMV_MAX_M and desc.n <= GEMV_MAX_N
            and desc.m * desc.n <= GEMV_MAX_MN)


def gemv_candidate(desc: GemmDesc, reason: str = "") -> Candidate:
    """The narrowest token tile holding M; 4 warps with 2 K blocks each in flight up to K = 2048,
    8 warps with 1 beyond. NOTES: the tuner's winners on the trace's M <= 16 shapes (session 10):
    (4, 2) at K = 256 / 1024, (8, 1) at K = 4096."""
    tile = 8 if desc.m <= 8 else 16
    warps, unroll = (4, 2) if desc.k <= 2048 else (8, 1)
    return Candidate(GEMV, tile, unroll, warps, 1, False, GEMV_ROWS,
                     reason=reason or f"gemv: M={desc.m} <= {tile}, {-(-desc.n // GEMV_ROWS)} CTAs of 16 rows")


# ---- variant: sm90_fp8_gemm_wg3 (v16) ------------------------------------------------------------
# The general kernel's plain mode with three consumer warpgroups: 192-row tiles, coarse promotion
# (bf16 / fp16 out), no split, no swap-AB. NOTES (bench/NOTES.md, v16): at large M it ran 4-8%
# faster per tile than the general kernel's 128 x 128 (8192 x 8192 x 4096: 421 vs 457 us), but
# its taller tiles quantize worse: 4096^3 (5.3 waves of 192-row tiles) ran 4% slower.

WG3 = "sm90_fp8_gemm_wg3"
WG3_BLOCK_M = 192
WG3_BLOCK_NS = (64, 128)
WG3_STAGES = 3               # measured faster than 4 at 5 of 7 large shapes (NOTES, v16)
WG3_MIN_M = 256              # the fallback's floor (below it one 128-row tile does)


def wg3_rate_gain(k: int) -> float:
    """Its tile rate over the general kernel's 128 x 128, wave quantization aside: 1.05 + 0.5 / K
    blocks, fitted to the tuner's run of session 11 at M >= 8192 (K = 256: 1.28-1.33, K = 1024:
    1.13-1.16, K = 4096: 1.07-1.09); short K gains most, where the general kernel's per-tile
    epilogue and pipeline fill are a larger share and the third warpgroup overlaps them."""
    return 1.05 + 0.5 / -(-k // GENERAL_BLOCK_K)


def wg3_smem_bytes(c: Candidate, out_dtype: str = "bfloat16") -> int:
    staging = general_staging_bytes(c.block_n, out_dtype) * 3 // 2      # three warpgroups' staging
    return 1024 + c.stages * (WG3_BLOCK_M + c.block_n) * GENERAL_BLOCK_K + staging + 2 * 8 * c.stages


def wg3_is_valid(desc: GemmDesc, c: Candidate) -> bool:
    return (c.variant == WG3 and c.block_m == WG3_BLOCK_M and c.block_n in WG3_BLOCK_NS and c.stages >= 2
            and c.group_m >= 1 and c.splits == 1 and not c.swap_ab and desc.out_dtype != "float32"
            and wg3_smem_bytes(c, desc.out_dtype) <= MAX_SMEM_PER_BLOCK
            and desc.m >= 1 and desc.n >= 1 and desc.k >= 16 and desc.k % 16 == 0)


def wg3_cost(m: int, n: int, k: int, num_sms: int) -> float:
    """general_cost's estimate for 192 x 128 tiles, the tensor-core term sped up by wg3_rate_gain."""
    k_blocks = -(-k // GENERAL_BLOCK_K)
    waves = -(-(-(-m // WG3_BLOCK_M) * -(-n // 128)) // num_sms)
    unique = (m + n) * k + 2 * m * n
    flops = waves * k_blocks * 2.0 * WG3_BLOCK_M * 128 * GENERAL_BLOCK_K
    return max(unique / HBM_BYTES_PER_US, flops / SM_FLOPS_PER_US / wg3_rate_gain(k))


def wg3_group_m(desc: GemmDesc) -> int:
    """Raster group 8 where B is large (N * K >= 32 Mi: 8192 x 4096 won by 6-7%), else 1 (won 29
    of the 38 shapes the tuner gave this kernel in session 11, by up to 10%)."""
    return 8 if desc.n * desc.k >= 32 << 20 else 1


def wg3_candidate(desc: GemmDesc, reason: str = "") -> Candidate:
    return Candidate(WG3, 128, WG3_STAGES, wg3_group_m(desc), 1, False, WG3_BLOCK_M,
                     reason=reason or f"wg3: 192 x 128 tiles, {WG3_STAGES} stages")


VARIANTS = {GENERAL: (general_is_valid, general_smem_bytes),
            SHORT_K: (short_k_is_valid, short_k_smem_bytes),
            GEMV: (gemv_is_valid, gemv_smem_bytes),
            WG3: (wg3_is_valid, wg3_smem_bytes)}


def variants() -> tuple:
    return tuple(VARIANTS)


def smem_bytes(c: Candidate, out_dtype: str = "bfloat16") -> int:
    return VARIANTS[c.variant][1](c, out_dtype)


def is_valid(desc: GemmDesc, c: Candidate) -> bool:
    return c.variant in VARIANTS and VARIANTS[c.variant][0](desc, c)


# ---- the table ------------------------------------------------------------------------------------

TABLE_DIR = Path(__file__).parent


@functools.lru_cache(maxsize=None)
def load_table(gpu: str = "h200") -> dict:
    """{(N, K): [(M, Candidate), ...] sorted by M} from <gpu>.json; empty when absent."""
    path = TABLE_DIR / f"{gpu}.json"
    if not path.exists():
        return {}
    raw = json.loads(path.read_text())
    table = {}
    for entry in raw.get("entries", []):
        cand = Candidate(entry["variant"], int(entry.get("block_n", 128)), int(entry.get("stages", 6)),
                         int(entry.get("group_m", 8)), int(entry.get("splits", 1)),
                         bool(entry.get("swap_ab", False)), int(entry.get("block_m", 128)),
                         reason=f"table {gpu}.json")
        table.setdefault((int(entry["n"]), int(entry["k"])), []).append((int(entry["m"]), cand))
    for rows in table.values():
        rows.sort(key=lambda r: r[0])
    return table


@functools.lru_cache(maxsize=4096)
def select(m: int, n: int, k: int, out_dtype: str = "bfloat16", gpu: str = "h200",
           force_variant: str | None = None, num_sms: int = DEFAULT_NUM_SMS) -> Candidate:
    """The kernel for one shape. ``force_variant`` restricts the choice to one variant."""
    desc = GemmDesc(m, n, k, out_dtype)
    if force_variant is not None and force_variant not in VARIANTS:
        raise ValueError(f"unknown variant {force_variant!r}; known: {', '.join(VARIANTS)}")
    rows = load_table(gpu).get((n, k), [])
    if rows:
        tuned_m, cand = min(rows, key=lambda r: (abs(r[0] - m), r[0]))
        # NOTES: only near its tuned M: an entry tuned at M=4096 says nothing about M=1 (swap-AB).
        if (tuned_m <= 2 * m and m <= 2 * tuned_m and is_valid(desc, cand)
                and force_variant in (None, cand.variant)):
            return _report(desc, replace(cand, reason=f"{cand.reason}, tuned at M={tuned_m}"))
    return _report(desc, fallback(desc, num_sms, force_variant))


def fallback(desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS, force_variant: str | None = None) -> Candidate:
    """The shape-based choice: the decode kernel where gemv_takes, short-K where short_k_takes,
    else the general kernel (plain or swap-AB) or, at large M, the three-warpgroup kernel.
    ``force_variant`` picks the variant; SHORT_K needs K <= 256, GEMV M <= 16, WG3 bf16 / fp16 out."""
    if force_variant == WG3:
        if desc.out_dtype == "float32":
            raise ValueError(f"variant {WG3} writes bf16 or fp16 only, not {desc.out_dtype}")
        return wg3_candidate(desc)
    if force_variant == GEMV:
        if desc.m > GEMV_TOKEN_TILES[-1]:
            raise ValueError(f"variant {GEMV} takes M <= {GEMV_TOKEN_TILES[-1]}, not M = {desc.m}")
        return gemv_candidate(desc)
    if force_variant is None and gemv_takes(desc):
        return gemv_candidate(desc, f"fallback: gemv (M={desc.m} <= {GEMV_MAX_M}, N={desc.n} <= {GEMV_MAX_N}, "
                                    f"K={desc.k} > {SHORT_K_MAX_K}): {-(-desc.n // GEMV_ROWS)} CTAs of 16 rows")
    use_short_k = short_k_takes(desc, num_sms)
    if force_variant == SHORT_K:
        if desc.k > SHORT_K_MAX_K:
            raise ValueError(f"variant {SHORT_K} takes K <= {SHORT_K_MAX_K}, not K = {desc.k}")
        use_short_k = True
    elif force_variant == GENERAL:
        use_short_k = False
    if use_short_k:
        return short_k_fallback(desc, num_sms)
    return general_fallback(desc, num_sms, allow_wg3=force_variant is None)


_printed = set()


def _report(desc: GemmDesc, cand: Candidate) -> Candidate:
    if os.environ.get("FP8GEMM_PRINT_CONFIG") == "1" and (desc, cand.key()) not in _printed:
        _printed.add((desc, cand.key()))
        print(f"fp8gemm: M={desc.m} N={desc.n} K={desc.k} {desc.out_dtype} -> {cand.variant} "
              f"block_m={cand.block_m} block_n={cand.block_n} stages={cand.stages} group_m={cand.group_m} splits={cand.splits} "
              f"swap_ab={cand.swap_ab} ({cand.reason})")
    return cand


def explain(m: int, n: int, k: int, out_dtype: str = "bfloat16", gpu: str = "h200") -> str:
    """A sentence saying which kernel a shape gets and why."""
    c = select(m, n, k, out_dtype, gpu)
    return (f"M={m} N={n} K={k} {out_dtype}: {c.variant} block_m={c.block_m} block_n={c.block_n} stages={c.stages} "
            f"group_m={c.group_m} splits={c.splits} swap_ab={c.swap_ab}, smem {smem_bytes(c, out_dtype)} B "
            f"-- {c.reason}")
