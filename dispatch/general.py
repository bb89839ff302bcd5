"""The general kernel's two loop structures: ``General`` (sm90_fp8_gemm_general, tokens on the
wgmma M side) and ``SwapAB`` (sm90_fp8_gemm_swap_ab, C^T = B A^T: weights on the 128-row side,
tokens on a narrow wgmma N tile), and the time model that picks their tiling and K splits.

Both are persistent (one CTA per SM over the work units: tiles x K splits), with a TMA producer
warpgroup, two consumer warpgroups of 64 rows each (or one: 64-row tiles), and a ring of
``stages`` A / B buffers (kernels_cu/general_tiles.cuh, common/pipeline.cuh: RingSmem). Both have
a grouped mode (MoE: dispatch/grouped.py chooses; 128-row tiles) and split K
(kernels_cu/split_k.cuh).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

from .. import compiler, tma
from ..dtypes import KERNEL_TYPE_IDS, OUT_BYTES
from ..hw import MAX_SMEM_PER_BLOCK
from ..launcher import (NARROW_ROW_BYTES, NO_SWIGLU, Plan, check_grid, check_units, gemm_args, group_args,
                        sm_count, tma_store_ok, token_tiles)
from .variant import BLOCK_K, DEFAULT_NUM_SMS, FLAG, Candidate, GemmDesc, cdiv

BLOCK_M = 128                               # tile rows: two consumer warpgroups of 64
BLOCK_MS = (64, 128)                        # General: one or two consumer warpgroups
BLOCK_NS = (8, 16, 32, 64, 128)             # must divide 128: a tile sits in one Bs row
SWAP_BLOCK_NS = (8, 16, 32, 64)             # token tiles of swap-AB (wgmma N)
SWAP_FALLBACK_BLOCK_NS = (8, 16, 32)        # the fallback's choices (64 measured slower: NOTES.md)
SWAP_MAX_M = 64                             # the fallback swaps A and B up to this many tokens
TILE64_MAX_M = 512                          # the tuner and the fallback try 64-row tiles up to this many tokens
TILE64_MIN_M = 33                           # the fallback's 64-row tiles start here (swap-AB below)
RING64_BYTES = 96 * 1024                    # the fallback's ring for 64-row tiles (fewer stages than fit)
MAX_SPLITS = 16
MAX_CLUSTER = 8                             # the portable cluster size (swap-AB's raw_cluster: S CTAs)
MAX_STAGES = 6                              # 128-row tiles (one instantiation serves all K)
MAX_STAGES_64 = 16                          # 64-row tiles: stages half the size, the ring deeper
BARRIER_BYTES = 16                          # per stage: a full and an empty mbarrier
SCALE_LOADS, SCALE_SLOTS_A, SCALE_SLOTS_B, SCALE_COPY, SCALE_WINDOW = 0, 1, 2, 4, 8   # kScaleTma (ScaleSource)
SCALE_LOADS_IN_BLOCK = 16       # the consumers' loads, each K block's in its own half of the loop
SCALE_COPIED = SCALE_SLOTS_A | SCALE_SLOTS_B | SCALE_COPY    # both slots, filled by the producer warp's cp.async
B_SLOT_BYTES = 128                                   # per stage (16 used; TMA destinations are 128-byte aligned)
WINDOW_BLOCKS = 32                                   # K blocks per scale window (128 bytes of a K-major row)
IN_BLOCK_MAX_BLOCKS = 8                              # units that take the in-block loads (32 bytes of a row)
CHUNKS = (8, 4)                 # K blocks per unrolled chunk of the K loop (kChunk), the longest that fits first

# Lab switch (FP8GEMM_GENERAL_ELECT_PRODUCER=1, off by default): the general and swap-AB kernels'
# producer lane chosen by elect.sync (kernels_cu/general_tiles.cuh: general_producer), as the dense
# kernel's under FP8GEMM_DENSE_ELECT_PRODUCER. Not yet measured.
ELECT_PRODUCER_SWITCH = os.environ.get("FP8GEMM_GENERAL_ELECT_PRODUCER", "0") == "1"
ELECT_PRODUCER_PRELUDE = "#define FP8GEMM_GENERAL_ELECT_PRODUCER 1\n"


def producer_prelude() -> str:
    """The general-family kernels' source prelude: the elected producer under its switch."""
    return ELECT_PRODUCER_PRELUDE if ELECT_PRODUCER_SWITCH else ""


def window_bytes(block_m: int) -> int:
    """general_tiles.cuh ScaleWindows<block_m>::kBytes: two windows of As (block_m x 32 floats)
    and Bs (32 floats), their four barriers, padded."""
    return 2 * block_m * WINDOW_BLOCKS * 4 + 2 * WINDOW_BLOCKS * 4 + 256
NO_SCALE_MAP = (("desc", tma.ZERO_DESCRIPTOR),) * 2   # the general kernel's last arguments, unused


def threads(block_m: int) -> int:
    """The producer warpgroup and one consumer warpgroup per 64 tile rows."""
    return 128 * (1 + block_m // 64)


def staging_bytes(block_n: int, out_dtype: str, block_m: int = BLOCK_M) -> int:
    """Shared memory of the TMA-store epilogue (each consumer warpgroup's 64 rows x block_n
    outputs); 0 where a tile row is not a whole number of 128-byte swizzle chunks (direct
    stores)."""
    row_bytes = block_n * OUT_BYTES[out_dtype]
    return 0 if row_bytes % 128 else block_m * row_bytes


def general_staging_bytes(block_n: int, out_dtype: str, block_m: int = BLOCK_M) -> int:
    """The general kernel's staging: staging_bytes, or where a tile row is NARROW_ROW_BYTES, the
    unswizzled box of each consumer warpgroup (NarrowStaging, epilogue.cuh)."""
    row_bytes = block_n * OUT_BYTES[out_dtype]
    return block_m * row_bytes if row_bytes in NARROW_ROW_BYTES else staging_bytes(block_n, out_dtype, block_m)


def raw_groups(out_dtype: str) -> int:
    """Promotion groups per K block of the raw split forms: 1, or the 4 wgmma of a block where fp32
    out promotes after each."""
    return BLOCK_K // 32 if out_dtype == "float32" else 1


def ring_smem_bytes(block_n: int, stages: int, staging: int, block_m: int = BLOCK_M) -> int:
    """RingSmem<block_m x 128, block_n x 128, stages, staging>: 1024 bytes of alignment slack,
    the stages, the staging, the barriers and the flags word."""
    return 1024 + stages * (block_m + block_n) * BLOCK_K + staging + BARRIER_BYTES * stages + 16


def max_stages(block_n: int, staging: int, block_m: int = BLOCK_M) -> int:
    """As many stages as shared memory holds, at most MAX_STAGES (MAX_STAGES_64 for 64-row tiles)."""
    free = MAX_SMEM_PER_BLOCK - 1024 - 16 - staging
    cap = MAX_STAGES if block_m == BLOCK_M else MAX_STAGES_64
    return max(2, min(free // ((block_m + block_n) * BLOCK_K + BARRIER_BYTES), cap))


def m_major_as_fits(p, rows: int) -> bool:
    """Whether TMA can fill a stage's As slot of ``rows`` tile rows: an M-major As with a 16-byte
    aligned base and column stride, and at least a tile of rows (the general and wg3 kernels).
    NOTES: a TMA map's row stride must hold its row (cuTensorMapEncodeTiled: globalStrides[0] >=
    globalDim[0] * element size), so a broadcast (stride 0) or overlapping As keeps the loads."""
    return p.sa_stride_m == 1 and p.sa_ptr % 16 == 0 and (p.sa_stride_k * 4) % 16 == 0 and p.m >= rows \
        and p.sa_stride_k >= p.m


def m_major_as_map(p, rows: int):
    """The As map those slots are filled from: inner dimension M, box {rows, 1 K block}."""
    return tma.encode_2d(p.sa_ptr, cdiv(p.k, BLOCK_K), p.m, p.sa_stride_k * 4, 1, rows, 4, tma.SWIZZLE_NONE)


def k_major_windows_fit(p) -> bool:
    """Whether TMA can read As and Bs in windows of 32 K blocks (SCALE_WINDOW): both K-major
    (unit K stride) with 16-byte aligned bases and row strides that hold a row (no broadcast or
    overlapping rows: m_major_as_fits)."""
    kb = cdiv(p.k, BLOCK_K)
    return (p.sa_stride_k == 1 and p.sb_stride_k == 1 and p.sa_ptr % 16 == 0 and p.sb_ptr % 16 == 0
            and (p.sa_stride_m * 4) % 16 == 0 and (p.sb_stride_n * 4) % 16 == 0
            and p.sa_stride_m >= kb and p.sb_stride_n >= kb)


def window_maps(p, rows: int) -> tuple:
    """The maps of SCALE_WINDOW: As [M, K / 128] with box {rows, 32} (128B-swizzled: the kernel
    reads each row's chunks through the swizzle's XOR) and Bs [N / 128, K / 128] with box {1, 32};
    TMA zero-fills what lies past either."""
    kb = cdiv(p.k, BLOCK_K)
    return (tma.encode_2d(p.sa_ptr, p.m, kb, p.sa_stride_m * 4, rows, WINDOW_BLOCKS, 4),
            tma.encode_2d(p.sb_ptr, cdiv(p.n, BLOCK_K), kb, p.sb_stride_n * 4, 1, WINDOW_BLOCKS, 4, tma.SWIZZLE_NONE))


def scale_source(p, cand: General):
    """(kScaleTma, As map, Bs map) of a plain GEMM with coarse promotion (not FP32 out): an M-major
    As (SCALE_SLOTS_A: at least a tile of rows, 16-byte aligned base and stride) goes by TMA into a
    slot of each stage, box {block_m rows, 1 K block}, where the slot fits beside the
    configuration's stages; Bs stays a load, as do both scales of any other layout. NOTES: the As
    loads are the scale path's whole cost on 128 x 128 tiles (4096^3: 112.9 us, 103.3 without
    them, 113.6 without the Bs load), while a Bs box per stage cost the producer 5-14%; a K-major
    As has no box TMA can fill per stage (16 bytes of each tile row). Both slots filled by the
    producer warp's cp.async from any layout (SCALE_COPIED, the kernel's kScaleCopy) ran 1-39%
    slower than the consumers' loads on 22 of 24 mid-M tiles, so it runs only when forced
    (bench/NOTES.md). A K-major As and Bs with 16-byte aligned rows come by TMA in windows of 32 K
    blocks (SCALE_WINDOW) on the tiles of windows_win, where they fit beside the stages; the loads
    of short units go each in its own block's half of the loop (SCALE_LOADS_IN_BLOCK,
    loads_in_block_win)."""
    none = (SCALE_LOADS, tma.ZERO_DESCRIPTOR, tma.ZERO_DESCRIPTOR)
    if p.out_dtype == "float32":
        return none
    if as_slots_fit(p, cand):
        return SCALE_SLOTS_A, m_major_as_map(p, cand.block_m), tma.ZERO_DESCRIPTOR
    if windows_win(cand, p.k) and k_major_windows_fit(p) and \
            cand.smem_bytes(p.out_dtype, SCALE_WINDOW) <= MAX_SMEM_PER_BLOCK:
        return (SCALE_WINDOW,) + window_maps(p, cand.block_m)
    if loads_in_block_win(cand, p.k):
        return (SCALE_LOADS_IN_BLOCK,) + none[1:]
    return none


def as_slots_fit(p, cand: General) -> bool:
    """Whether a plain GEMM with coarse promotion takes As by TMA into stage slots (SCALE_SLOTS_A):
    an M-major As that m_major_as_fits, with the slots beside the configuration's stages."""
    return p.out_dtype != "float32" and m_major_as_fits(p, cand.block_m) and \
        cand.smem_bytes(p.out_dtype, SCALE_SLOTS_A) <= MAX_SMEM_PER_BLOCK


def windows_win(cand: General, k: int) -> bool:
    """The tiles that take the scale windows (H200, mid-M shapes and 4096^3 against DeepGEMM in
    the same process, bench/NOTES.md): 128-row tiles, where they ran 1-5% faster than the loads,
    and 64 x 128, where a first form ran 6-8% faster and the committed one as fast. On 64-row tiles
    with block_n <= 64 the loads ran as fast or faster with the shallow rings those tiles use
    (64 x 64 s6: 4-7%; 64 x 32 s8: 2-8%). Only where a unit's K blocks fill a window: at K = 1024
    (8 blocks per unit, the window's TMA waited for at each unit's start) the trace's windowed
    128-row shapes ran 10-20% slower than the loads had in the run before, DeepGEMM unchanged.
    A tail split counts as no split (most of its tiles run whole)."""
    blocks = cdiv(cdiv(k, BLOCK_K), max(cand.splits, 1))
    return (cand.block_m == BLOCK_M or cand.block_n == 128) and blocks >= WINDOW_BLOCKS


def loads_in_block_win(cand: General, k: int) -> bool:
    """The tiles whose loads take SCALE_LOADS_IN_BLOCK (each block's scales loaded in its own
    half of the K loop; H200 against DeepGEMM in the same process, bench/NOTES.md): units of at
    most 8 K blocks (K = 1024 unsplit), where they ran up to 6% faster (2.7% geomean over 13
    trace shapes) on 128-row tiles and 64-row tiles of 8-32 columns. Not 64-row tiles of 64 or
    more columns (64 x 64 at K = 1024: 5% slower to 3% faster), nor longer units (64-row tiles at
    K = 4096: 3-9% slower, the loads' lead too short for the L1 misses of every eighth block). A
    tail split counts as no split."""
    blocks = cdiv(cdiv(k, BLOCK_K), max(cand.splits, 1))
    return blocks <= IN_BLOCK_MAX_BLOCKS and not (cand.block_m == 64 and cand.block_n >= 64)


def unit_blocks(cand: General, m: int, n: int, k: int, num_sms: int) -> set:
    """The K-block counts of a plain launch's work units (scheduler.cuh: TileScheduler): each
    split's share of ceil(K / 128) blocks, the last one's what is left (0: an empty split); under
    TAIL_SPLIT the whole tiles' count and the last wave's splits'."""
    kb = cdiv(k, BLOCK_K)
    if cand.splits == TAIL_SPLIT:
        tiles = cdiv(m, cand.block_m) * cdiv(n, cand.block_n)
        splits = tail_split_count(tiles, kb, num_sms)
        whole = {kb} if tiles >= num_sms else set()        # tiles of whole waves run unsplit
    else:
        splits, whole = _splits(cand.splits, k), set()
    per = cdiv(kb, splits)
    return whole | {min(per, max(0, kb - i * per)) for i in range(splits)}


def chunk_blocks(p, cand: General, num_sms: int) -> int:
    """kChunk, the K loop unrolled over chunks of that many blocks (0: the rolled loops), for a
    plain GEMM whose scales are loaded (not FP32 out: its fine promotion has its own loop):
    As and Bs with a unit K stride (the chunk's scales at immediate offsets), every unit a whole
    number of chunks (no empty split), a ring that chunk_fits, and on 128-row tiles units of one
    chunk. The longest of CHUNKS that fits. NOTES: H200, same tiles and rings, time / DeepGEMM's
    in the same process (bench/NOTES.md): 12% fewer instructions issued (ncu, 48 x 4096 x 1024 on
    64 x 32 s16), 1.4% faster geomean over the 20 trace shapes it takes (0.95-1.05x), but 6-9%
    slower on 128 x 128 s4 tiles with units of 32 K blocks (four chunks), which keep the rolled
    loops."""
    if p.out_dtype == "float32" or p.sa_stride_k != 1 or p.sb_stride_k != 1:
        return 0
    return units_chunk(cand, unit_blocks(cand, p.m, p.n, p.k, num_sms))


def units_chunk(cand: General, units: set) -> int:
    """chunk_blocks' rule on the units' K-block counts alone: the longest of CHUNKS that fits the
    ring and divides every unit (no empty one), on 128-row tiles only units of one chunk; 0 if none."""
    for chunk in CHUNKS:
        if chunk_fits(cand, chunk) and all(u > 0 and u % chunk == 0 for u in units) \
                and (cand.block_m != BLOCK_M or units == {chunk}):
            return chunk
    return 0


def chunk_fits(cand: General, chunk: int) -> bool:
    """Whether the chunked K loop of ``chunk`` blocks fits the configuration: a ring whose
    stages the chunk divides or that divides the chunk; not 64 x 128 tiles, whose one consumer
    warpgroup holds 192 accumulators per thread and spills with the chunk's scale registers."""
    ring = cand.stages % chunk == 0 or chunk % cand.stages == 0
    return ring and not (cand.block_m == 64 and cand.block_n == 128)


def chunk_ring(cand: General, most: int, desc: GemmDesc, num_sms: int):
    """The same tiling on the deepest ring of at most ``most`` stages that a chunk of the chunked
    K loop fits (CHUNKS), where the units would take the chunk (chunk_blocks' rule on unit K
    strides) and ``cand``'s own ring does not; else None. A tuner candidate: the rings the
    fallback picks (64 x 64 s6, 128-row s6) take no chunk."""
    units = unit_blocks(cand, desc.m, desc.n, desc.k, num_sms)
    if desc.out_dtype == "float32" or units_chunk(cand, units):
        return None
    for stages in (16, 8, 4):
        other = replace(cand, stages=stages)
        if stages <= most and units_chunk(other, units):
            return other
    return None


def ring64_stages(block_n: int, most: int) -> int:
    """Stages of a 64-row tile's ring of about RING64_BYTES (at least 4, at most ``most``)."""
    return max(min(4, most), min(most, RING64_BYTES // ((64 + block_n) * BLOCK_K)))


def prefix_bytes(num_groups: int) -> int:
    """The grouped mode's tile prefix (num_groups + 1 words), 16-byte aligned, after the ring."""
    return -(-4 * (num_groups + 1) // 16) * 16


# ---- the time model ---------------------------------------------------------------------------
# Constants: H200, measured or fitted with lab/sweep_splits.py (bench/NOTES.md).
HBM_BYTES_PER_US = 4.3e6      # device copy bandwidth, bytes read + written
SM_BYTES_PER_US = 95e3        # one SM's TMA stream when few SMs share HBM (fitted)
SM64_BYTES_PER_US = 80e3      # the same with one consumer warpgroup (64-row tiles; fitted)
SM_FLOPS_PER_US = 11.26e6     # FP8 dense peak / 132 SMs
SPLIT_FIXED_US = 1.0          # publish partial, barrier + acq_rel atomic, final re-read (fitted)
SPLIT_EACH_US = 0.05          # each further split the last CTA reads (fitted with 16 in flight)


def split_count(tiles: int, k_blocks: int, num_sms: int) -> int:
    """The most K splits worth trying: split only when the tiles cannot fill half the SMs; each
    split keeps >= 2 K blocks, and the units (tiles x splits) fill at most one wave."""
    if 2 * tiles > num_sms or k_blocks < 4:
        return 1
    return max(1, min(k_blocks // 2, num_sms // tiles, MAX_SPLITS))


def cost_us(rows: int, cols: int, k: int, block_n: int, splits: int, num_sms: int, block_m: int = BLOCK_M) -> float:
    """Estimated microseconds (less the fixed launch cost) of a rows x cols tile space (rows = M,
    or N under swap-AB) cut into block_m x block_n tiles and `splits` K ranges: the slowest of HBM
    (unique bytes), one SM's operand stream (re-reads of a shared operand hit L2 but still pass
    through the SM) and one SM's tensor cores, plus the split-K overheads (fixed, per split, and
    the partial tiles written and re-read)."""
    k_blocks = cdiv(k, BLOCK_K)
    tiles = cdiv(rows, block_m) * cdiv(cols, block_n)
    tail = splits == TAIL_SPLIT
    if tail:
        # whole waves of whole tiles, then the last wave's tiles split tail_split_count ways
        splits = tail_split_count(tiles, k_blocks, num_sms)
        waves_kb = tiles // num_sms * k_blocks + (cdiv(k_blocks, splits) if tiles % num_sms else 0)
    else:
        waves_kb = cdiv(tiles * splits, num_sms) * cdiv(k_blocks, splits)
    waves = cdiv(waves_kb, cdiv(k_blocks, splits))
    unit_bytes = (block_m + block_n) * BLOCK_K
    unit_flops = 2.0 * block_m * block_n * BLOCK_K
    unique = (rows + cols) * k + 2 * rows * cols
    stream = SM_BYTES_PER_US if block_m == BLOCK_M else SM64_BYTES_PER_US
    t = max(unique / HBM_BYTES_PER_US, waves_kb * unit_bytes / stream, waves_kb * unit_flops / SM_FLOPS_PER_US)
    if splits > 1:
        partial = min(rows, block_m) * min(block_n, cols) * 4
        t += SPLIT_FIXED_US + SPLIT_EACH_US * (splits - 1)
        t += ((1 if tail else waves) * partial + 2 * splits * partial) / SM_BYTES_PER_US
    return t


def tail_split_pays(tiles: int, num_sms: int) -> bool:
    """Whether TAIL_SPLIT has a last wave to even out: more than a wave of tiles, the last at most
    half full (fuller, its tiles cannot split in two within the grid)."""
    return tiles > num_sms and 0 < tiles % num_sms <= num_sms // 2


def best_tiling(rows: int, cols: int, k: int, block_ns, num_sms: int, block_m: int = BLOCK_M):
    """(cost, block_n, tiles, splits) of least cost over block_n and split counts (ties: the
    first tried)."""
    k_blocks = cdiv(k, BLOCK_K)
    best = None
    for block_n in block_ns:
        tiles = cdiv(rows, block_m) * cdiv(cols, block_n)
        for splits in range(1, split_count(tiles, k_blocks, num_sms) + 1):
            cost = cost_us(rows, cols, k, block_n, splits, num_sms, block_m)
            if best is None or cost < best[0] * 0.999:
                best = (cost, block_n, tiles, splits)
    return best


def plain_group_m(desc: GemmDesc) -> int:
    """Raster group (tile rows per sweep of the tile columns). NOTES: from the trace-wide tuner
    run (bench/NOTES.md): group 1 won 41 of 60 plain shapes with M >= 1024 (by 1-6%), except at
    N = 8192 with K >= 1024, where 8-16 won; group 8 won every plain shape with M < 1024. Swap-AB
    takes group 1: it won 78 of 108 swap-AB shapes (by up to 27% at M = 16-32, K = 4096)."""
    return 1 if desc.m >= 1024 and (desc.n <= 4096 or desc.k <= 256) else 8


TAIL_SPLIT = 0      # ``splits``: only the last wave's tiles split, as the grid fills (scheduler.cuh kTailSplit)


def _splits(splits: int, k: int) -> int:
    return TAIL_SPLIT if splits == TAIL_SPLIT else max(1, min(splits, cdiv(k, BLOCK_K)))


def tail_split_count(tiles: int, k_blocks: int, num_sms: int) -> int:
    """The splits of each last-wave tile under TAIL_SPLIT (scheduler.cuh: TileScheduler, the same
    rule): the tiles of whole waves run unsplit, the rest split as many ways as the grid then
    fills, each split keeping >= 8 K blocks; 1 where the waves are whole."""
    rest = tiles % num_sms
    return 1 if rest == 0 else max(1, min(num_sms // rest, k_blocks // 8))


@dataclass(frozen=True)
class General(Candidate):
    """sm90_fp8_gemm_general: block_m x block_n tiles of C (block_m 128: two consumer
    warpgroups; 64: one, for few tokens), ``stages`` ring buffers, tile rows rastered in groups of
    ``group_m``, K cut into ``splits`` ranges reduced in the kernel (deterministic: the last split
    of a tile sums them in order)."""

    variant = "sm90_fp8_gemm_general"
    block_n: int = 128
    stages: int = 6
    group_m: int = 8
    splits: int = 1
    block_m: int = BLOCK_M

    def smem_bytes(self, out_dtype: str = "bfloat16", scale_slots: int = SCALE_LOADS) -> int:
        """The ring, the TMA-store staging and the scale slots of ``scale_slots`` (a kScaleTma
        mask): As, a float per tile row and stage; Bs, B_SLOT_BYTES per stage; SCALE_WINDOW, the
        two windows (window_bytes)."""
        slots = (self.block_m * 4 if scale_slots & SCALE_SLOTS_A else 0) + \
            (B_SLOT_BYTES if scale_slots & SCALE_SLOTS_B else 0)
        windows = window_bytes(self.block_m) if scale_slots & SCALE_WINDOW else 0
        return ring_smem_bytes(self.block_n, self.stages, general_staging_bytes(self.block_n, out_dtype, self.block_m),
                               self.block_m) + self.stages * slots + windows

    def is_valid(self, desc: GemmDesc) -> bool:
        return (self.block_n in BLOCK_NS and self.block_m in BLOCK_MS and self.stages >= 2 and self.group_m >= 1
                and (1 <= self.splits <= MAX_SPLITS or self.splits == TAIL_SPLIT)
                and self.smem_bytes(desc.out_dtype) <= MAX_SMEM_PER_BLOCK
                and desc.shape_ok())

    def label(self) -> str:
        return f"general {self.block_m}x{self.block_n} s{self.stages} g{self.group_m} {_split_label(self.splits)}"

    def template_args(self, out_dtype: str, fine: bool, tma_store: bool, grouped: bool,
                      swiglu: bool = False, scale_tma: int = 0, chunk: int = 0) -> tuple:
        """<BLOCK_N, kNumStages, kOutType, kGroupM, kFinePromotion, kTmaStore, kGrouped[, kSwiGLU
        [, kConsumers[, kScaleTma[, kChunk]]]]> (the defaulted ones named only when they differ)."""
        head = (self.block_n, self.stages, KERNEL_TYPE_IDS[out_dtype], self.group_m, FLAG[fine], FLAG[tma_store],
                FLAG[grouped])
        if chunk:
            return head + (FLAG[swiglu], self.block_m // 64, scale_tma, chunk)
        if scale_tma:
            return head + (FLAG[swiglu], self.block_m // 64, scale_tma)
        if self.block_m != BLOCK_M:
            return head + (FLAG[swiglu], self.block_m // 64)
        return head + (("true",) if swiglu else ())

    def plan(self, p, ldc: int, out_aligned: bool) -> Plan:
        """FP32 output promotes after every wgmma (kFinePromotion): the tensor cores' FP8
        accumulation error (~2e-4) would otherwise exceed FP32's 1e-4 tolerance. The epilogue
        stores through TMA (kTmaStore) where tma_store_ok allows."""
        store = tma_store_ok(p.n, self.block_n, OUT_BYTES[p.out_dtype], ldc, out_aligned, narrow=True)
        # The chunked loop loads its scales (no slots or windows); the As slots win over it.
        chunk = 0 if as_slots_fit(p, self) else chunk_blocks(p, self, sm_count(p.device))
        source, tmap_sa, tmap_sb = (SCALE_LOADS, tma.ZERO_DESCRIPTOR, tma.ZERO_DESCRIPTOR) if chunk \
            else scale_source(p, self)
        smem = self.smem_bytes(p.out_dtype, source)
        kern = compiler.get_kernel(p.device, self.variant,
                                   self.template_args(p.out_dtype, p.out_dtype == "float32", store, False,
                                                      scale_tma=source, chunk=chunk), smem, producer_prelude())
        tmap_a = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda, self.block_m)
        tmap_b = tma.encode_2d_fp8(p.b_ptr, p.n, p.k, p.ldb, self.block_n)
        narrow = store and self.block_n * OUT_BYTES[p.out_dtype] in NARROW_ROW_BYTES
        return _persistent_plan(p, kern, smem, ldc, tmap_a, tmap_b, store,
                                cdiv(p.m, self.block_m) * cdiv(p.n, self.block_n), self.block_n,
                                _splits(self.splits, p.k), None, self.block_m, (("desc", tmap_sa), ("desc", tmap_sb)),
                                store_box=self.block_n if narrow else 0)

    def grouped_smem_bytes(self, out_dtype: str, num_groups: int) -> int:
        return self.smem_bytes(out_dtype) + prefix_bytes(num_groups)

    def plan_grouped(self, gp, ldc: int, out_aligned: bool, precise_fp32: bool = True) -> Plan:
        """The grouped mode (kGrouped): A and C are all groups' rows, B the groups' weights
        stacked as [G * N, K]. The kernel reads the offsets or counts on the device, so the plan
        holds only bounds: a grid of at most one CTA per SM over the most tiles the groups can
        have, and a split-K workspace for that many. NOTES: compiled for the most shared memory
        a CTA may have: the tile prefix grows with G, and one instantiation serves every G."""
        if self.block_m != BLOCK_M:
            raise ValueError(f"the grouped mode runs 128-row tiles, not block_m={self.block_m}")
        p = gp.gemm
        store = tma_store_ok(p.n, self.block_n, OUT_BYTES[p.out_dtype], ldc, out_aligned)
        fine = p.out_dtype == "float32" and precise_fp32
        kern = compiler.get_kernel(p.device, self.variant, self.template_args(p.out_dtype, fine, store, True),
                                   MAX_SMEM_PER_BLOCK, producer_prelude())
        tmap_a = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda, BLOCK_M)
        tmap_b = tma.encode_2d_fp8(p.b_ptr, gp.num_groups * p.n, p.k, p.ldb, self.block_n)
        tiles = token_tiles(p.m, BLOCK_M, gp) * cdiv(p.n, self.block_n)
        return _persistent_plan(p, kern, self.grouped_smem_bytes(p.out_dtype, gp.num_groups), ldc, tmap_a, tmap_b,
                                store, tiles, self.block_n, _splits(self.splits, p.k), gp,
                                tail=NO_SCALE_MAP)

    @classmethod
    def fallback_block_ns(cls, desc: GemmDesc) -> tuple:
        return (16,) if desc.n <= 16 else (128, 64, 32, 16)

    @classmethod
    def estimate_us(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS) -> float:
        """The time model's estimate for the fallback's tiling."""
        rows, cols = cls.tile_space(desc)
        return best_tiling(rows, cols, desc.k, cls.fallback_block_ns(desc), num_sms)[0]

    @classmethod
    def fallback(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS) -> General:
        """The tiling (block_m, block_n, splits) of least estimated time (cost_us; 64-row tiles
        from TILE64_MIN_M to TILE64_MAX_M tokens, bf16 / fp16 out, where their estimate is
        lower than the 128-row tiles'); 128-row tiles take as many stages as shared
        memory holds, 64-row tiles a ring of RING64_BYTES; the raster group of plain_group_m."""
        cost, block_n, tiles, splits = best_tiling(desc.m, desc.n, desc.k, cls.fallback_block_ns(desc), num_sms)
        tile64 = cls.fallback_64(desc, num_sms)
        if tile64 is not None and tile64[0] < cost:
            return tile64[1]
        stages = cls.most_stages(block_n, desc.out_dtype)
        return cls(block_n, stages, plain_group_m(desc), splits,
                   reason=f"fallback: block_n={block_n}, splits={splits} for {tiles} tiles x "
                          f"{cdiv(desc.k, BLOCK_K)} K blocks on {num_sms} SMs, stages={stages}")

    @classmethod
    def fallback_64(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS):
        """(estimate, candidate) of the best 64-row tiling, or None outside TILE64_MIN_M ..
        TILE64_MAX_M tokens or for FP32 out. NOTES: fitted on the tuner's measurements of the
        trace at M <= 512 (bench/NOTES.md): the one-consumer stream rate SM64_BYTES_PER_US and a
        ring of about 96 KiB (64 x 32 tiles: 8 stages beat 16; 64 x 64: 6 beat 13)."""
        if not TILE64_MIN_M <= desc.m <= TILE64_MAX_M or desc.out_dtype == "float32":
            return None
        cost, block_n, tiles, splits = best_tiling(desc.m, desc.n, desc.k, cls.fallback_block_ns(desc), num_sms, 64)
        stages = ring64_stages(block_n, cls.most_stages(block_n, desc.out_dtype, 64))
        return cost, cls(block_n, stages, 8, splits, 64,
                         reason=f"fallback: 64-row tiles, block_n={block_n}, splits={splits} for {tiles} tiles x "
                                f"{cdiv(desc.k, BLOCK_K)} K blocks on {num_sms} SMs, stages={stages}")

    @classmethod
    def tuner_candidates(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS) -> list:
        """Both loop structures together (swap-AB up to 2 x SWAP_MAX_M tokens; 64-row tiles up to
        TILE64_MAX_M), ranked by one time model: every (orientation, tile, splits) tiling at the most
        stages (64-row ones: a ring of about RING64_BYTES), and for the two best tilings also 4
        stages (64-row ones: the most) and raster groups 16 and 1."""
        k_blocks = cdiv(desc.k, BLOCK_K)
        tilings = []   # (model us, class, block_n, splits, block_m)
        for kind in ((cls, SwapAB) if desc.m <= 2 * SWAP_MAX_M else (cls,)):
            rows, cols = kind.tile_space(desc)
            for block_m in (BLOCK_MS if kind is cls and desc.m <= TILE64_MAX_M else (BLOCK_M,)):
                for block_n in kind.block_ns:
                    if block_n > max(16, 2 * cols) and block_n != 128:
                        continue                     # tiles far wider than the matrix: pure padding
                    tiles = cdiv(rows, block_m) * cdiv(cols, block_n)
                    max_splits = max(split_count(tiles, k_blocks, num_sms), 1)
                    # NOTES: a 128 x 128 tile's 64 KiB partial pays for its split from 32 K blocks
                    # (768 x 4096 x 4096: 1.066x; 300 x 6400 x 2048, 16 blocks: 0.96x); swap-AB's
                    # 4-16 KiB ones from 16 (bench/NOTES.md)
                    tail = ((TAIL_SPLIT,) if tail_split_pays(tiles, num_sms)
                            and k_blocks >= (16 if kind is SwapAB else 32) else ())
                    for splits in (1, 2, 3, 4, 6, 8, 12, 16) + tail:
                        if splits <= max_splits or splits == TAIL_SPLIT:
                            tilings.append((cost_us(rows, cols, desc.k, block_n, splits, num_sms, block_m), kind,
                                            block_n, splits, block_m))
        tilings.sort(key=lambda t: t[0])
        out = []
        for i, (_, kind, block_n, splits, block_m) in enumerate(tilings):
            most = kind.most_stages(block_n, desc.out_dtype, block_m)
            # 64-row tiles: the fallback's ~96 KiB ring first (it beat the most stages on most
            # shapes where they won), the most as the alternative.
            stages = most if block_m == BLOCK_M else ring64_stages(block_n, most)
            out.append(kind(block_n, stages, 8, splits, block_m))
            if i < 4 and kind is cls:
                chunked = chunk_ring(kind(block_n, stages, 8, splits, block_m), most, desc, num_sms)
                if chunked is not None:
                    out.append(chunked)
            if i < 2:
                other = 4 if block_m == BLOCK_M else most
                if other != stages and (block_m != BLOCK_M or stages > other):
                    out.append(kind(block_n, other, 8, splits, block_m))
                if cdiv(kind.tile_space(desc)[0], block_m) > 8:
                    out += [kind(block_n, stages, 16, splits, block_m), kind(block_n, stages, 1, splits, block_m)]
        return out

    block_ns = BLOCK_NS

    @staticmethod
    def tile_space(desc: GemmDesc) -> tuple:
        return desc.m, desc.n

    @staticmethod
    def most_stages(block_n: int, out_dtype: str, block_m: int = BLOCK_M) -> int:
        return max_stages(block_n, general_staging_bytes(block_n, out_dtype, block_m), block_m)


@dataclass(frozen=True)
class SwapAB(General):
    """sm90_fp8_gemm_swap_ab (decode): C^T = B A^T, ``block_m`` weight rows x ``block_n`` tokens a
    tile, per-column scales, transposed direct stores; otherwise General's knobs. ``block_m`` 64:
    one consumer warpgroup (the kernel's kConsumers = 1), twice the tiles over N for the same K
    range, the plain GEMM only (not grouped, no raw split); neither the fallback nor the tuner
    offers it yet (the batch-invariant mode's, under dispatch/invariant.py: SWAP64). ``raw_split``
    (forced only; the batch-invariant mode's, once its GPU tests have run): ``splits`` explicit K
    splits that keep each K block's raw accumulator, promoted in order by the tile's last split,
    so a row's bits are the unsplit tile's (the kernel's kRawSplit). ``raw_cluster`` (forced only;
    the batch-invariant mode's under FP8GEMM_BATCH_INVARIANT_RAW_CLUSTER=1): the same bits with
    the ``splits`` = S splits of a tile one cluster of S <= 8 CTAs that keep their raw
    accumulators in shared memory and each promote 1/S of the tile (the kernel's kRawCluster);
    one unit per CTA, the ring's stages as given (``cluster_tile`` picks the most that fit beside
    the raw slots)."""

    variant = "sm90_fp8_gemm_swap_ab"
    block_n: int = 16             # defaults only differ from General's (the fields keep their order)
    group_m: int = 1
    raw_split: int = 0
    raw_cluster: int = 0

    block_ns = SWAP_BLOCK_NS

    def smem_bytes(self, out_dtype: str = "bfloat16", *, k: int | None = None) -> int:
        """The ring; with ``k``, for raw_cluster, its raw slots after it (the launch's size). ``k``
        is keyword-only: General.smem_bytes' second argument is a scale-slot mask."""
        raw = self.raw_slot_bytes(k, out_dtype) if self.raw_cluster and k is not None else 0
        return ring_smem_bytes(self.block_n, self.stages, 0, self.block_m) + raw

    def raw_slot_bytes(self, k: int, out_dtype: str) -> int:
        """raw_cluster: a CTA's raw slots, a block_m x block_n fp32 slot per K block of its split
        (ceil(nkb / S), the scheduler's split points) and promotion group (4 where fp32 out promotes
        after every wgmma)."""
        return cdiv(cdiv(k, BLOCK_K), self.splits) * raw_groups(out_dtype) * self.block_m * self.block_n * 4

    def is_valid(self, desc: GemmDesc) -> bool:
        """The raw split needs explicit splits (the kernel numbers a tile's raw slots by tile) and
        128-row tiles (the ones its GPU test forces). The cluster form: 2 <= S <= MAX_CLUSTER (a
        portable cluster), S <= the K blocks, the plain GEMM's tiles of 64 or 128 rows, and the
        ring beside the raw slots within shared memory."""
        if self.raw_cluster:
            return (self.raw_cluster == 1 and not self.raw_split and 2 <= self.splits <= MAX_CLUSTER
                    and self.splits <= cdiv(desc.k, BLOCK_K) and self.block_n in SWAP_BLOCK_NS
                    and self.block_m in BLOCK_MS and self.stages >= 2 and self.group_m >= 1
                    and self.smem_bytes(desc.out_dtype, k=desc.k) <= MAX_SMEM_PER_BLOCK and desc.shape_ok())
        return (self.block_n in SWAP_BLOCK_NS and self.block_m in BLOCK_MS and self.raw_split in (0, 1)
                and self.raw_cluster == 0
                and (not self.raw_split or (2 <= self.splits <= MAX_SPLITS and self.block_m == BLOCK_M))
                and super().is_valid(desc))

    def label(self) -> str:
        raw = " raw" if self.raw_split else " raw-cluster" if self.raw_cluster else ""
        return f"swap {self.block_m}x{self.block_n} s{self.stages} g{self.group_m} {_split_label(self.splits)}{raw}"

    def template_args(self, out_dtype: str, fine: bool, grouped: bool) -> tuple:
        """<BLOCK_N, kNumStages, kOutType, kGroupM, kFinePromotion, kGrouped[, kRawSplit[, kConsumers[,
        kRawCluster]]]> (the defaulted ones named only when they differ)."""
        head = (self.block_n, self.stages, KERNEL_TYPE_IDS[out_dtype], self.group_m, FLAG[fine], FLAG[grouped])
        if self.raw_cluster:
            return head + (FLAG[False], self.block_m // 64, FLAG[True])
        if self.block_m != BLOCK_M:
            return head + (FLAG[bool(self.raw_split)], self.block_m // 64)
        return head + ((FLAG[True],) if self.raw_split else ())

    @classmethod
    def cluster_tile(cls, block_n: int, splits: int, k: int, out_dtype: str, block_m: int = BLOCK_M) -> SwapAB:
        """raw_cluster's tile: as many stages as fit beside the raw slots (at most the plain tile's;
        at least 2, which is_valid refuses where even they do not fit)."""
        c = cls(block_n, 2, 1, splits, block_m, raw_cluster=1)
        return replace(c, stages=max_stages(block_n, c.raw_slot_bytes(k, out_dtype), block_m))

    def raw_ws_floats(self, p) -> int:
        """The raw split's workspace: a 128 x block_n slot per (tile, K block, promotion group:
        1, or the 4 wgmma of a K block where fp32 out promotes after each)."""
        return (cdiv(p.n, BLOCK_M) * cdiv(p.m, self.block_n) * cdiv(p.k, BLOCK_K) * raw_groups(p.out_dtype)
                * BLOCK_M * self.block_n)

    def plan(self, p, ldc: int, out_aligned: bool) -> Plan:
        """Tile space C^T (N x M): the wgmma A operand is B."""
        if self.raw_cluster:
            return self._plan_cluster(p, ldc)
        smem = self.smem_bytes(p.out_dtype)
        kern = compiler.get_kernel(p.device, self.variant,
                                   self.template_args(p.out_dtype, p.out_dtype == "float32", False), smem,
                                   producer_prelude())
        tmap_a = tma.encode_2d_fp8(p.b_ptr, p.n, p.k, p.ldb, self.block_m)
        tmap_b = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda, self.block_n)
        return _persistent_plan(p, kern, smem, ldc, tmap_a, tmap_b, False,
                                cdiv(p.n, self.block_m) * cdiv(p.m, self.block_n), self.block_n,
                                _splits(self.splits, p.k), None, self.block_m,
                                ws_floats=self.raw_ws_floats(p) if self.raw_split else None)

    def _plan_cluster(self, p, ldc: int) -> Plan:
        """raw_cluster: one unit per CTA (grid = tiles x S, units in order), launched in clusters of
        S along x so that cluster rank r runs split r of its tile; no workspace (the Plan's splits
        stay 1; the kernel's num_splits is S). One instantiation serves every K: compiled for the
        most shared memory, launched with this K's."""
        desc = GemmDesc(p.m, p.n, p.k, p.out_dtype)
        if not self.is_valid(desc):
            raise ValueError(f"{self.label()}: not valid at M={p.m} N={p.n} K={p.k} {p.out_dtype} (S <= "
                             f"{MAX_CLUSTER} and <= the K blocks; ring + raw slots "
                             f"{self.smem_bytes(p.out_dtype, k=p.k)} B within {MAX_SMEM_PER_BLOCK})")
        smem = self.smem_bytes(p.out_dtype, k=p.k)
        kern = compiler.get_kernel(p.device, self.variant,
                                   self.template_args(p.out_dtype, p.out_dtype == "float32", False),
                                   MAX_SMEM_PER_BLOCK, producer_prelude())
        tmap_a = tma.encode_2d_fp8(p.b_ptr, p.n, p.k, p.ldb, self.block_m)
        tmap_b = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda, self.block_n)
        tiles = cdiv(p.n, self.block_m) * cdiv(p.m, self.block_n)
        units = tiles * self.splits
        check_grid(units, f"M = {p.m}, N = {p.n}")
        check_units(units, f"M = {p.m}, N = {p.n}")
        return Plan(p, kern, units, threads(self.block_m), smem, ldc,
                    gemm_args(tmap_a, tmap_b, p, ldc) + (("u32", p.k), ("u32", self.splits), ("u64", 0), ("u64", 0))
                    + group_args(None) + NO_SWIGLU, cluster=self.splits)

    def plan_grouped(self, gp, ldc: int, out_aligned: bool, precise_fp32: bool = True) -> Plan:
        """Each group's weight rows on the 128-row side of a tile, its tokens on block_n columns."""
        p = gp.gemm
        if self.raw_split or self.raw_cluster:
            raise ValueError("SwapAB(raw_split=1 / raw_cluster=1) is the plain GEMM's split; the grouped GEMMs "
                             "do not take it")
        if self.block_m != BLOCK_M:
            raise ValueError(f"the grouped mode runs 128-row tiles, not block_m={self.block_m}")
        fine = p.out_dtype == "float32" and precise_fp32
        kern = compiler.get_kernel(p.device, self.variant, self.template_args(p.out_dtype, fine, True),
                                   MAX_SMEM_PER_BLOCK, producer_prelude())
        tmap_a = tma.encode_2d_fp8(p.b_ptr, gp.num_groups * p.n, p.k, p.ldb, BLOCK_M)
        tmap_b = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda, self.block_n)
        tiles = token_tiles(p.m, self.block_n, gp) * cdiv(p.n, BLOCK_M)
        return _persistent_plan(p, kern, self.grouped_smem_bytes(p.out_dtype, gp.num_groups), ldc, tmap_a, tmap_b,
                                False, tiles, self.block_n, _splits(self.splits, p.k), gp)

    @classmethod
    def fallback_block_ns(cls, desc: GemmDesc) -> tuple:
        return SWAP_FALLBACK_BLOCK_NS

    @classmethod
    def fallback(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS) -> SwapAB:
        """The token tile and splits of least estimated time over SWAP_FALLBACK_BLOCK_NS; the most
        stages; raster group 1."""
        _, block_n, tiles, splits = best_tiling(desc.n, desc.m, desc.k, SWAP_FALLBACK_BLOCK_NS, num_sms)
        return cls(block_n, cls.most_stages(block_n, desc.out_dtype), 1, splits,
                   reason=f"fallback: swap-AB (M={desc.m} <= {SWAP_MAX_M}), token tile {block_n}, "
                          f"splits={splits} for {tiles} tiles x {cdiv(desc.k, BLOCK_K)} K blocks on "
                          f"{num_sms} SMs")

    @classmethod
    def tuner_candidates(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS) -> list:
        return []          # searched with General's (one time model ranks both)

    @staticmethod
    def tile_space(desc: GemmDesc) -> tuple:
        return desc.n, desc.m

    @staticmethod
    def most_stages(block_n: int, out_dtype: str, block_m: int = BLOCK_M) -> int:
        return max_stages(block_n, 0, block_m)


def _split_label(splits: int) -> str:
    return "ktail" if splits == TAIL_SPLIT else f"k{splits}"


def _persistent_plan(p, kern, smem: int, ldc: int, tmap_a, tmap_b, tma_store: bool, tiles: int, block_n: int,
                     splits: int, gp, block_m: int = BLOCK_M, tail: tuple = (), store_box: int = 0,
                     ws_floats: int | None = None) -> Plan:
    """The launch both loop structures share: one CTA per SM at most over tiles x splits units,
    a split-K workspace of a block_m x block_n partial tile per unit, and the argument list
    gemm_args + (K, splits, workspace, counters) + the groups + the SwiGLU slots (unused) +
    ``tail`` (the general kernel: the As tensor map). ``ws_floats``: another workspace size (the
    raw split's).
    TAIL_SPLIT: a CTA on every SM (the kernel splits the last wave over the whole grid; grouped,
    ``tiles`` is only a bound), a partial per CTA at most."""
    sms = sm_count(p.device)
    units = sms if splits == TAIL_SPLIT else tiles * splits
    if gp is None:
        check_grid(tiles * max(splits, 1), f"M = {p.m}, N = {p.n}")
    check_units(tiles + sms if splits == TAIL_SPLIT else tiles * splits, f"M = {p.m}, N = {p.n}")
    return Plan(p, kern, min(units, sms), threads(block_m), smem, ldc,
                gemm_args(tmap_a, tmap_b, p, ldc) + (("u32", p.k), ("u32", splits), ("u64", 0), ("u64", 0))
                + group_args(gp) + NO_SWIGLU + tail,
                tma_store=tma_store, splits=splits, num_tiles=tiles,
                ws_floats=units * block_m * block_n if ws_floats is None else ws_floats,
                store_box=store_box)
