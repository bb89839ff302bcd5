"""Batch-invariant mode (issue 57, phase 1: ``fp8gemm.matmul``): a row of C is bitwise the same
whatever M it came in, M = 1 included.

The guarantee: for the same GPU model, the same fp8gemm version, the same N, K, output dtype,
B, Bs and the row's own A row and As row, ``matmul(..., batch_invariant=True)`` writes the same
bits into that row for every M. ``out=`` (its strides, alignment) and the layout of As (row-major,
M-major) may differ between the calls; the SM count of the device does not enter either.

The rule (``invariant_candidate``; ``mode_candidate`` takes other tiles measured to give the same
bits, below: the default dispatcher's own pick where it is such a tile, DEFAULT_PICKS, and at
M <= SMALL_M_MAX the small-M tiles): one kernel and every knob that decides a row's summation
order chosen from (N, K, out dtype) alone, never from M:

* the one tile is the general kernel's (``General``) for every M; what else runs is a kind of
  tile measured to give its bits (DEFAULT_PICKS, SMALL_M_TILES), never gemv (it sums K blocks in
  warp-turn order through mma.sync m16n8k32 and shared memory: measured different bits) and
  never a split;
* 128-row tiles (``block_m`` fixed), ``block_n``, ``stages`` and ``group_m`` fixed by (N, K,
  out dtype): the block_n that the time model (general.cost_us) puts within LARGE_M_SLACK of the
  best at M >= 1024 (where the mode's cost goal is 3%), the least costly of those at M <= 256;
* no K split: ``splits=1``. ``General.splits`` is the knob that fixes both the split and the
  tail split (general.TAIL_SPLIT = 0 is the tail split, whose split count the kernel derives from
  the tile count, i.e. from M; any count > 1 splits every tile); splits=1 gives every unit the
  whole K range [0, ceil(K / 128)) and no split_k_publish / split_k_sum;
* the promotion mode per output dtype: fine (after every wgmma, K = 32) for float32 out, coarse
  (after every 128-wide K block) for bf16 / fp16. Both depend on the dtype only (General.plan).

Why that fixes a row's bits (kernels_cu/sm90_fp8_gemm_general.cu): a consumer warpgroup owns 64
rows of a tile and issues wgmma m64nNk32 over them, the same instructions for every tile; an
output element (r, c) of a wgmma depends only on A row r and B row c (the rows past M are zeros
from TMA, or under general_tiles.cuh's a_box shift other rows' bytes, and reach only their own,
unstored outputs). Per K block (kb = 0, 1, ... in order, from total = 0) the kernel runs 4 wgmma
into a fresh accumulator and promotes it per element, ``total += acc * (As[r, kb] * Bs[c/128,
kb])`` (one FMUL, one FFMA; fine promotion: the same after each wgmma). What still depends on M
changes no arithmetic: which CTA runs a tile (the grid is min(tiles, SMs), the raster), where the
scales are read from (general.scale_source: As by TMA into stage slots needs M >= block_m; the
windows, the in-block loads and the chunked loop, chunk_blocks, read the same floats and promote
with the same expression, in the same block order), the ordered issue of the two warpgroups, a
warpgroup wholly past M skipping its wgmma, TMA-store or direct epilogue (both cvt.rn).
block_m, block_n, swap-AB: by the same argument 64-row tiles (one consumer warpgroup, the same
m64 wgmma and promotion) should give the same bits as 128-row tiles; whether wgmma's per-element
result is the same for every N of the instruction, or with the operands swapped, is not
documented. Measured on the H100 (session 38, tests/test_batch_invariant.py's evidence tests,
three shapes, three dtypes): 64-row tiles, every width 16-128 and unsplit swap-AB token tiles
gave every row the mode's bits; gemv did not. ``mode_candidate`` uses that at M <= SMALL_M_MAX
(SMALL_M_TILES, on by default; FP8GEMM_BATCH_INVARIANT_SMALL_M=0 turns it off, and then the one
tile serves every M). It defaults on since its GPU test ran on the H100 80GB HBM3 (session 39,
lab/device_bi_small_m.sh with the tiles on): test_small_m_tiles_keep_the_bits (M1 <= 256 against
the same rows in M2 > 256) passed for bf16, fp16 and fp32, and so did every other bitwise test of
tests/test_batch_invariant.py and tests/test_batch_invariant_grouped.py but gemv's evidence test
(an expected failure). At M <= 256 a row's bits rest on that measurement, not on the argument
above alone; the H200 has not run it yet.

The torch ops (fp8gemm/torch_ops.py: matmul, matmul_out and the vLLM / DeepGEMM forms), the JAX
functions (fp8gemm/jax.py: its own FFI target, plans keyed by mode) and ``fp8gemm-bench
--batch-invariant`` take the mode. So do the grouped GEMMs (fp8gemm/grouped.py:
``invariant_grouped_candidate`` below, the plain mode's tile for every group size, never chosen
from the rows per group) and the MoE layer (fp8gemm.moe: the chain unless fused=True is passed,
never the per-expert device choice; moe_ep passes the mode to each rank's layer), through the same
front ends (torch ops with a bool in the schema, JAX targets with a ``_batch_invariant`` suffix).
The grouped / MoE bitwise tests (tests/test_batch_invariant_grouped.py) passed on the H100
(session 38). What remains: the cost at small M (issue 57's goal: within 10% of the default at M <= 64, 3% at
M >= 1024). On the H200 (fp8gemm-bench --quick --batch-invariant, session 41), the mode's time over
the default's with the default's picks: 1.347x at M <= 64, 1.150x at 64 < M <= 256, 1.013x at
256 < M < 1024, 0.998x at M >= 1024 (without them: 1.398x, 1.204x, 1.346x, 1.081x). What is left
is where the default splits K or runs gemv at small M: the mode cannot follow a split whose
promoted partials are summed (the association changes with the split points). A split that keeps
each K block's raw accumulator and promotes them all in order at the end does not change it
(swap-AB's raw split, RAW_SPLIT below; forced only until its GPU test has run; bench/NOTES.md,
session 42).

64-row swap-AB tiles (SWAP64; on by default since session 47, FP8GEMM_BATCH_INVARIANT_SWAP64=0 off):
at M <= SMALL_M_MAX the small-M rule may also take unsplit swap-AB tiles of 64 weight rows (one
consumer warpgroup): twice the CTAs over N where the default splits K and the mode may not. A
row's bits should be the mode's by the m64 argument above, as for the general kernel's 64-row
tiles: each warpgroup runs the same wgmma chain and promotion on its own 64 rows whatever the
tile height (the compiled kernels' float arithmetic is the 128-row tile's, opcode for opcode:
tests/test_kernels_compile.py). Measured: its bits (tests/test_batch_invariant.py:
test_swap64_gives_the_same_bits, H100 session 46; the whole file with SWAP64 and RAW_CLUSTER on,
H200 session 47) and its time (H100, fp8gemm-bench --quick --batch-invariant: the mode's time over
the default's at M <= 64 1.245 -> 1.175, with RAW_CLUSTER as well 1.153; bench/NOTES.md, session 46).

The cluster raw split (RAW_CLUSTER; on by default since session 47, FP8GEMM_BATCH_INVARIANT_RAW_CLUSTER=0
off): the raw split's arithmetic (each K block's raw wgmma accumulator promoted in block order
from +0 with the unsplit loop's FMUL and FFMA) with the S <= 8 splits of a tile one thread-block
cluster that exchanges the raw slots through distributed shared memory, each CTA promoting and
storing 1/S of the tile. A row's bits should be the unsplit swap-AB tile's of the same height (the
per-block wgmma results do not depend on which CTA ran the block): measured as SWAP64's above
(test_raw_cluster_gives_the_same_bits; the whole file with both on); its cost model's exchange term
is still an estimate.
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import replace

from ..hw import MAX_SMEM_PER_BLOCK
from .general import (BLOCK_K, BLOCK_M, MAX_CLUSTER, MAX_SPLITS, MAX_STAGES, SWAP_BLOCK_NS, General, SwapAB, cost_us,
                      plain_group_m, raw_groups, ring64_stages)
from .selector import SHIPPED_GPU
from .selector import explain as _explain
from .variant import DEFAULT_NUM_SMS, GemmDesc, cdiv

ENV = "FP8GEMM_BATCH_INVARIANT"
ENABLED = os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")   # the process-wide mode

SMALL_MS = (1, 16, 64, 256)          # the time model's reference sizes (never the call's M)
LARGE_MS = (1024, 4096, 16384)
LARGE_M_SLACK = 1.02                 # block_n within 2% of the best at LARGE_MS
GROUP_M_AT = 4096                    # group_m: plain_group_m's rule at this M


def set_batch_invariant(flag: bool) -> None:
    """Turn the process-wide batch-invariant mode on or off (what ``batch_invariant=None`` means
    in fp8gemm.matmul; initially $FP8GEMM_BATCH_INVARIANT=1)."""
    global ENABLED
    ENABLED = bool(flag)


def batch_invariant() -> bool:
    """Whether the process-wide batch-invariant mode is on."""
    return ENABLED


def resolve(flag) -> bool:
    """A call's mode: ``flag``, or the process-wide one where it is None."""
    return ENABLED if flag is None else bool(flag)


def _geomean(xs) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


@functools.lru_cache(maxsize=4096)
def invariant_candidate(n: int, k: int, out_dtype: str = "bfloat16") -> General:
    """The general kernel's configuration for every M of (N, K, out dtype) in batch-invariant
    mode: 128-row tiles, no K split, block_n by the time model at reference sizes (module
    docstring), the most stages that fit, group_m of the large-M rule."""
    block_ns = General.fallback_block_ns(GemmDesc(1, n, k, out_dtype))   # (16,) for N <= 16
    ratios = {}
    for block_n in block_ns:
        ratios[block_n] = tuple(
            _geomean([cost_us(m, n, k, block_n, 1, DEFAULT_NUM_SMS) /
                      min(cost_us(m, n, k, b, 1, DEFAULT_NUM_SMS) for b in block_ns) for m in ms])
            for ms in (LARGE_MS, SMALL_MS))
    best_large = min(r[0] for r in ratios.values())
    near = [b for b in block_ns if ratios[b][0] <= best_large * LARGE_M_SLACK]
    block_n = min(near, key=lambda b: (ratios[b][1], -b))
    stages = General.most_stages(block_n, out_dtype)
    group_m = plain_group_m(GemmDesc(GROUP_M_AT, n, k, out_dtype))
    large, small = ratios[block_n]
    return General(block_n, stages, group_m, 1, BLOCK_M,
                   reason=f"batch-invariant: the general kernel for every M, {BLOCK_M} x {block_n} tiles "
                          f"(time model over reference M: {large:.2f}x the best block_n at M >= {LARGE_MS[0]}, "
                          f"{small:.2f}x at M <= {SMALL_MS[-1]}), stages={stages}, no K split; chosen by "
                          f"N={n}, K={k}, {out_dtype} alone")


# Small M (on by default; FP8GEMM_BATCH_INVARIANT_SMALL_M=0 turns it off): the tile of least
# modelled time among those measured to give a row the mode's bits. NOTES (bench/NOTES.md session
# 38, H100, tests/test_batch_invariant.py's evidence tests at three shapes, bf16 / fp16 / fp32):
# every general-kernel width 16-128, 64-row tiles and unsplit swap-AB tiles of 8, 16 and 64 tokens
# gave every row the same bits as the mode's tile; gemv did not. Still no K split: the split points
# would be the only thing that changes the order. On by default since session 39 (H100 80GB HBM3):
# with it on, test_small_m_tiles_keep_the_bits and every other bitwise GPU test of the mode passed
# for every dtype (gemv's evidence test failed, as expected), and the mode's cost at M <= 64 fell
# from 1.748x the default to 1.338x (64 < M <= 256: 1.668x to 1.184x; M > 256: the same tile).
# Not yet run on the H200.
SMALL_M_ENV = "FP8GEMM_BATCH_INVARIANT_SMALL_M"
SMALL_M_TILES = os.environ.get(SMALL_M_ENV, "").strip().lower() not in ("0", "false", "no", "off")
SMALL_M_MAX = 256                    # above it the mode's one tile


# The default's picks (issue 57's cost; on by default, FP8GEMM_BATCH_INVARIANT_DEFAULT_PICKS=0 turns
# them off): at any M the default dispatcher's own pick where it is a tile of a kind that gives a
# row the mode's bits, so that the mode costs nothing there: the dense kernel (bf16 / fp16 out: its
# K loop runs the general kernel's coarse promotion, the same expression per 128-wide K block in
# the same block order), unsplit general tiles of the widths measured (session 38: 16-128, 64 or
# 128 rows), unsplit swap-AB tiles (measured, and the small-M rule's own), short-K tiles (the same
# promotion, block 0 added to zero since session 41) and wg3's 192-row tiles at bf16 / fp16 (the
# same expression in the same block order). Every other pick (gemv, a split, a wider general tile)
# gets the small-M rule or the mode's one tile. The default's pick depends on M and on the GPU's
# table; the bits do not, as measured: on the H200 (session 41, lab/device_s40.sh BI=1, source
# ad6a0f00) every dense tile of the evidence tests (64x64, 128x128, 128x128 2acc,
# 128x96, 256x128 pairs sharing A, 128x128 pairs sharing B; bf16, fp16), short-K (bf16, fp16,
# fp32) and wg3 (bf16, fp16) gave every row the mode's bits, and test_default_picks_keep_the_bits
# (the first rows at ten M from 1 to 2048 against the same rows at M = 4096, every trace (N, K)
# whose picks differ in kind, bf16 / fp16 / fp32) passed; those evidence tests are now plain tests
# (tests/test_batch_invariant.py: test_default_pick_kinds_give_the_same_bits). The mode's cost against the default
# there (fp8gemm-bench --quick --batch-invariant, H200): M >= 1024 1.081x -> 0.998x, 256 < M <
# 1024 1.346x -> 1.013x, 64 < M <= 256 1.204x -> 1.150x, M <= 64 1.398x -> 1.347x.
DEFAULT_PICKS_ENV = "FP8GEMM_BATCH_INVARIANT_DEFAULT_PICKS"
DEFAULT_PICKS = os.environ.get(DEFAULT_PICKS_ENV, "").strip().lower() not in ("0", "false", "no", "off")

# The neighbour picks (on by default since session 48; FP8GEMM_BATCH_INVARIANT_NEIGHBOUR_PICKS=0 off): with
# DEFAULT_PICKS, where the default's pick at this M does not keep the bits (gemv, which serves M <= 8-16
# of most trace (N, K), or a K split), the table's pick at the nearest larger tuned M up to SMALL_M_MAX
# that does (a dense, short-K or unsplit swap-AB tile, measured fastest at M' rows; with the short A
# box a dense tile loads only round_up(M, 8) rows of A). The small-M model it replaces there
# overestimated the cluster raw split: 2.4 us modelled against 6.0 measured at 1 x 512 x 4096 (H100,
# session 46). The mode's cost against the default at M <= 64 (fp8gemm-bench --quick --batch-invariant,
# H100, session 48's h100.json): 1.142x off, 1.059x on (bench/NOTES.md, session 48). Bits: the same
# kinds of tile as DEFAULT_PICKS (tests/test_batch_invariant.py: test_neighbour_picks_keep_the_bits).
NEIGHBOUR_PICKS_ENV = "FP8GEMM_BATCH_INVARIANT_NEIGHBOUR_PICKS"
NEIGHBOUR_PICKS = os.environ.get(NEIGHBOUR_PICKS_ENV, "").strip() != "0"
MEASURED_WIDTHS = (16, 32, 64, 128)

# The raw split (FP8GEMM_BATCH_INVARIANT_RAW_SPLIT=1, off until its GPU test has run:
# tests/test_batch_invariant.py, test_raw_split_gives_the_same_bits): at M <= SMALL_M_MAX the
# small-M rule may also take swap-AB tiles split along K whose splits keep each K block's raw
# wgmma accumulator and whose last split promotes them all in order (the kernel's kRawSplit), so a
# row gets the unsplit tile's bits whatever the split count, and the decode shapes (N <= 1536 at
# K = 4096, 1.3-2.1x the default unsplit) get the default's K parallelism back. Its time is
# modelled as an ordinary split's (cost_us): the raw slots' stores and the ordered sum are not in
# the model and not yet measured.
RAW_SPLIT_ENV = "FP8GEMM_BATCH_INVARIANT_RAW_SPLIT"
RAW_SPLIT = os.environ.get(RAW_SPLIT_ENV, "").strip() == "1"
DENSE_DTYPES = ("bfloat16", "float16")     # the dense kernel promotes per K block: not fp32's fine mode

# 64-row swap-AB tiles (on by default since session 47, FP8GEMM_BATCH_INVARIANT_SWAP64=0 off: module
# docstring): at M <= SMALL_M_MAX the small-M rule may also take them, unsplit, modelled as the
# general kernel's 64-row tiles are (general.cost_us with block_m=64: one consumer's stream rate)
# on their ring (general.ring64_stages).
SWAP64_ENV = "FP8GEMM_BATCH_INVARIANT_SWAP64"
SWAP64 = os.environ.get(SWAP64_ENV, "").strip() != "0"

# The cluster raw split (on by default since session 47, FP8GEMM_BATCH_INVARIANT_RAW_CLUSTER=0 off;
# its bits: tests/test_batch_invariant.py, test_raw_cluster_gives_the_same_bits): at M <= SMALL_M_MAX the
# small-M rule may also take swap-AB tiles whose S <= 8 K splits run as one cluster, keep their
# raw accumulators in shared memory and each promote 1/S of the tile over every K block in order
# (the kernel's kRawCluster): the raw split's bits (the unsplit tile's) without its workspace
# round trips; 64-row tiles only with SWAP64 on as well (their bits rest on its m64 argument). Modelled as the ordinary split's K loop (general.cost_us) plus
# RAW_CLUSTER_EXCHANGE_US and each CTA's share of the slots read through distributed shared
# memory at RAW_CLUSTER_DSMEM_BYTES_PER_US: both ESTIMATES, not fitted to any run (issue 57's
# study put the exchange at +0.3-1.0 us over the ordinary split).
RAW_CLUSTER_ENV = "FP8GEMM_BATCH_INVARIANT_RAW_CLUSTER"
RAW_CLUSTER = os.environ.get(RAW_CLUSTER_ENV, "").strip() != "0"
RAW_CLUSTER_EXCHANGE_US = 0.4         # estimate: two cluster barriers, the scale loads' first trip
RAW_CLUSTER_DSMEM_BYTES_PER_US = 100e3   # estimate: one SM's reads of its peers' shared memory


def swap64_tile(block_n: int, out_dtype: str) -> SwapAB:
    """SWAP64's tile: ``block_n`` tokens, 64 weight rows, no split, on the ring the general
    kernel's 64-row tiles take (about general.RING64_BYTES; the stages change no bits)."""
    return SwapAB(block_n, ring64_stages(block_n, SwapAB.most_stages(block_n, out_dtype, 64)), 1, 1, 64)


def raw_cluster_cost_us(m: int, n: int, k: int, c: SwapAB, out_dtype: str, num_sms: int = DEFAULT_NUM_SMS) -> float:
    """RAW_CLUSTER's estimate for tile ``c``: the ordinary split's time (general.cost_us, which
    knows the K loop and the waves) plus the exchange: a fixed RAW_CLUSTER_EXCHANGE_US and each
    CTA's 1/S of every K block's slots at RAW_CLUSTER_DSMEM_BYTES_PER_US. An estimate."""
    slot_bytes = c.block_m * c.block_n * 4 * raw_groups(out_dtype)
    per_cta = cdiv(k, BLOCK_K) * slot_bytes / c.splits
    return (cost_us(n, m, k, c.block_n, c.splits, num_sms, c.block_m) + RAW_CLUSTER_EXCHANGE_US
            + per_cta / RAW_CLUSTER_DSMEM_BYTES_PER_US)


def default_pick_keeps_bits(cand, out_dtype: str) -> bool:
    """Whether the default dispatcher's ``cand`` is a tile the mode may run (DEFAULT_PICKS): a
    dense or wg3 tile at bf16 / fp16 out, an unsplit general tile of a measured width, an unsplit
    swap-AB tile (of 64 rows only under SWAP64), a short-K tile."""
    from .dense import Dense
    from .short_k import ShortK
    from .wg3 import Wg3
    if isinstance(cand, (Dense, Wg3)):
        return out_dtype in DENSE_DTYPES
    if isinstance(cand, ShortK):
        return True
    if isinstance(cand, SwapAB):
        return cand.splits == 1 and cand.block_n in SWAP_BLOCK_NS and (cand.block_m == BLOCK_M or SWAP64)
    return (type(cand) is General and cand.splits == 1 and cand.block_n in MEASURED_WIDTHS
            and cand.block_m in (64, BLOCK_M))


def mode_candidate(m: int, n: int, k: int, out_dtype: str = "bfloat16", num_sms: int = DEFAULT_NUM_SMS,
                   gpu: str = SHIPPED_GPU, device_sms: int | None = None):
    """The mode's tile for this M: with DEFAULT_PICKS the default's own pick where
    default_pick_keeps_bits; else with SMALL_M_TILES (the default) at M <= SMALL_M_MAX the unsplit
    general width or swap-AB token tile (with SWAP64 also of 64 rows) of least modelled time
    (general.cost_us); else invariant_candidate. ``num_sms``: the small-M time model's (the tested
    default); ``gpu`` and ``device_sms``: the device's, for the default's pick."""
    base = invariant_candidate(n, k, out_dtype)
    if DEFAULT_PICKS:
        from .selector import select
        pick = select(m, n, k, out_dtype, gpu, num_sms=device_sms or DEFAULT_NUM_SMS)
        if default_pick_keeps_bits(pick, out_dtype):
            return replace(pick, reason=f"batch-invariant at M={m} (the default's pick): {pick.label()} "
                                        f"({pick.reason}); a kind of tile measured to give a row the mode's "
                                        f"bits (dispatch/invariant.py: DEFAULT_PICKS)")
        if NEIGHBOUR_PICKS and m <= SMALL_M_MAX:
            from .selector import load_table
            desc = GemmDesc(m, n, k, out_dtype)
            for tuned_m, cand in load_table(gpu).get((n, k), []):      # sorted by M: the nearest first
                if m < tuned_m <= SMALL_M_MAX and default_pick_keeps_bits(cand, out_dtype) and cand.is_valid(desc):
                    return replace(cand, reason=f"batch-invariant at M={m} (the table's pick at M={tuned_m}, the "
                                                f"default's {pick.label()} does not keep the bits): {cand.label()}; "
                                                f"a kind of tile measured to give a row the mode's bits "
                                                f"(dispatch/invariant.py: NEIGHBOUR_PICKS)")
    if not SMALL_M_TILES or m > SMALL_M_MAX:
        return base
    desc = GemmDesc(m, n, k, out_dtype)
    options = [(cost_us(m, n, k, base.block_n, 1, num_sms), base)]
    for bn in General.fallback_block_ns(desc):
        c = General(bn, General.most_stages(bn, out_dtype), base.group_m, 1, BLOCK_M)
        options.append((cost_us(m, n, k, bn, 1, num_sms), c))
    for bn in SWAP_BLOCK_NS:
        if bn >= 2 * m and bn > SWAP_BLOCK_NS[0]:
            continue                 # a wider token tile than M needs only adds zero rows
        options.append((cost_us(n, m, k, bn, 1, num_sms), SwapAB(bn, MAX_STAGES, 1, 1)))
        if SWAP64:
            options.append((cost_us(n, m, k, bn, 1, num_sms, 64), swap64_tile(bn, out_dtype)))
        for splits in range(2, min(MAX_SPLITS, -(-k // 128)) + 1) if RAW_SPLIT else ():
            options.append((cost_us(n, m, k, bn, splits, num_sms), SwapAB(bn, MAX_STAGES, 1, splits, raw_split=1)))
        for splits in range(2, min(MAX_CLUSTER, -(-k // 128)) + 1) if RAW_CLUSTER else ():
            for block_m in (BLOCK_M, 64) if SWAP64 else (BLOCK_M,):     # 64 rows: SWAP64's m64 argument too
                c = SwapAB.cluster_tile(bn, splits, k, out_dtype, block_m)
                options.append((raw_cluster_cost_us(m, n, k, c, out_dtype, num_sms), c))
    valid = [(t, c) for t, c in options if c.is_valid(desc)]
    t, best = min(valid, key=lambda o: o[0])
    if getattr(best, "raw_split", 0):
        how = "K split with raw per-block accumulators promoted in order (RAW_SPLIT)"
    elif getattr(best, "raw_cluster", 0):
        how = (f"K split in a cluster of {best.splits} CTAs exchanging raw per-block accumulators through "
               f"distributed shared memory, promoted in order (RAW_CLUSTER; time an estimate)")
    elif isinstance(best, SwapAB) and best.block_m != BLOCK_M:
        how = "unsplit 64-row swap-AB tiles, the same m64 chain per warpgroup (SWAP64, bits measured equal)"
    else:
        how = "unsplit, bits measured equal to it"
    return replace(best, reason=f"batch-invariant at M={m} (small-M tiles): {best.label()}, modelled {t:.1f} us "
                                f"against {options[0][0]:.1f} for the mode's {base.label()}; {how} "
                                f"(dispatch/invariant.py: SMALL_M_TILES)")


@functools.lru_cache(maxsize=4096)
def invariant_grouped_candidate(n: int, k: int, out_dtype: str, num_groups: int) -> General:
    """The grouped GEMMs' tile in batch-invariant mode: the plain mode's (invariant_candidate, so a
    row of a group gets the bits the plain matmul gives it against that group's weights), with as
    many stages as fit beside the ``num_groups`` tile prefix (stages change no arithmetic). Never
    swap-AB or the 192-row tiles, and no K split, whatever the rows per group."""
    c = invariant_candidate(n, k, out_dtype)
    for stages in range(c.stages, 1, -1):
        g = replace(c, stages=stages)
        if g.grouped_smem_bytes(out_dtype, num_groups) <= MAX_SMEM_PER_BLOCK:
            return replace(g, reason=f"{c.reason}; grouped: stages={stages} beside a {num_groups}-group tile prefix")
    raise AssertionError("unreachable: two stages and 8192 groups fit")


def explain(m: int, n: int, k: int, out_dtype: str = "bfloat16", gpu: str = SHIPPED_GPU,
            batch_invariant: bool | None = None) -> str:
    """fp8gemm.explain: which kernel a shape gets and why (selector.explain), or in batch-invariant
    mode (``batch_invariant``, None: the process-wide mode) the mode's kernel and why."""
    if not resolve(batch_invariant):
        return _explain(m, n, k, out_dtype, gpu)
    from ..validate import check_gemm_dims
    sig = check_gemm_dims(m, n, k, out_dtype)
    m, n, k, out_dtype = sig.m, sig.n, sig.k, sig.out_dtype
    if m == 0:
        return f"M=0 N={n} K={k} {out_dtype}: no kernel (matmul returns the empty [0, {n}] result without a launch)"
    c = mode_candidate(m, n, k, out_dtype, gpu=gpu)
    # a raw-cluster launch sizes its shared memory for this K's raw slots beside the ring
    smem = c.smem_bytes(out_dtype, k=k) if getattr(c, "raw_cluster", 0) else c.smem_bytes(out_dtype)
    return (f"M={m} N={n} K={k} {out_dtype} (batch-invariant): {c.describe()}, smem {smem} B "
            f"-- {c.reason}; each row's summation order (K blocks in order, per-element promotion, no split) "
            f"is the same for every M")
