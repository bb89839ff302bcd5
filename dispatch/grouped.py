"""The grouped GEMMs' tile choice (MoE: fp8gemm.grouped, fp8gemm.moe) and the fused SwiGLU L1.

The grouped mode is a mode of three variants: ``General`` (128-row token tiles), ``SwapAB`` (decode:
weight rows on the 128-row side, tokens on an 8/16/32-wide tile) and ``Wg3`` (192-row tiles). The
counts stay on the GPU, so the choice works from an estimate of the rows per group.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

from .. import compiler, tma
from ..hw import MAX_GROUPS, MAX_SMEM_PER_BLOCK
from ..launcher import Plan, check_units, gemm_args, sm_count, token_tiles
from .general import (BLOCK_M, BLOCK_NS, MAX_STAGES, NO_SCALE_MAP, SWAP_BLOCK_NS, TAIL_SPLIT, General, SwapAB,
                      prefix_bytes, ring_smem_bytes, split_count, tail_split_pays, threads)
from . import dense
from .dense import Dense
from .variant import BLOCK_K, DEFAULT_NUM_SMS, Candidate, GemmDesc, cdiv
from .wg3 import Wg3

# the variants with a grouped mode (Dense: forced only, with its K-major As window switched on)
GROUPED_TILES = (General, SwapAB, Wg3, Dense)

SWAP_MAX_ROWS = 32    # token tiles of the grouped swap-AB mode: 8, 16 or 32 rows
# 192-row tiles of the three-warpgroup kernel where the rows-per-group estimate lies in (lo, hi]
# (the estimate is twice the mean, rows_estimate: a mean of 120-165 rows). NOTES
# (lab/exp_moe_prefill.py --wg3): 1.07-1.34x at 129-192 rows per expert, 0.61-0.88x at 128 and
# 256; Pro L1 at 8192 tokens (mean 128) 1.08x, Flash (mean 192) 0.88x. None: off.
WG3_ROWS = (240.0, 330.0)
# fp8gemm.moe: where the rows estimate lies in (lo, hi] (a mean of 100-225 rows per expert), both
# grouped kernels are launched for each GEMM and the routing kernel gives each expert one of them
# from its real count (moe_glue.cu, choice_costs); each kernel sees the other's experts empty.
# NOTES: the window alone cannot tell uniform routing (Pro at 8192 tokens 1.08x on 192-row tiles)
# from skewed routing with the same mean (0.91x); per expert, Flash at 8192 tokens (192 +- 14
# rows) puts about half its experts on each kernel.
MOE_CHOICE_ROWS = (200.0, 450.0)
# fp8gemm.moe's default (fused=None): the fused SwiGLU L1 where the rows estimate lies in [lo, hi],
# the chain elsewhere. NOTES (bench/results/h200_moe.csv, the chain's time / the fused layer's,
# same run): 1.006-1.27x at an estimate of 8-32 rows (V4-Flash 256-512 tokens, V4-Pro 256-1024,
# uniform and skewed; there the chain's L1 runs swap-AB tiles of 8-32 tokens, slow on a skewed
# expert's hundreds of rows, and the fused L1 128-row tiles); 0.58-0.69x at 1-16 tokens (the
# chain's swap-AB on 1-4 rows each), 0.96-1.07x at 64-128 tokens (2-6 rows), 0.92-1.03x from 48
# rows on (the same 128-row tiles, or 192-row ones).
FUSED_ROWS = (8.0, 32.0)
# The dense kernel's grouped mode in pairs of one expert's row tiles sharing its weights by
# multicast (Dense c2B): NOTES (session 40, H100, lab/grouped_dense_ab.py, V4-Flash uniform top-6):
# 0.876x / 0.898x DeepGEMM's time at 4096 tokens (L1 / L2), 1.031x / 1.062x at 8192, 0.4-2.7%
# ahead of our default tiles. FP8GEMM_GROUPED_DENSE=1 makes it the 128-row tile (lab A/B and
# fp8gemm-bench --moe) until both GPUs, both models and skewed routing have measured it.
GROUPED_DENSE = os.environ.get("FP8GEMM_GROUPED_DENSE", "0") == "1"


def rows_estimate(rows: int, num_groups: int):
    """(rows per non-empty group, non-empty groups) when ``rows`` rows fall on at most
    min(G, rows) groups: the mean doubled for uneven routing. The host's estimate that the
    windows above are written in (fp8gemm.grouped and fp8gemm.moe make it; the counts stay on the GPU)."""
    rows = max(1, int(rows))
    active = min(num_groups, rows)
    return 2.0 * rows / active, active


def fused_default(rows_per_expert: float) -> bool:
    """Whether fp8gemm.moe fuses the SwiGLU into L1 when the caller leaves ``fused`` None."""
    return FUSED_ROWS[0] <= rows_per_expert <= FUSED_ROWS[1]


def device_choice(rows_per_expert: float, fused: bool) -> bool:
    """Whether fp8gemm.moe launches both grouped kernels for each GEMM and lets the routing kernel
    pick (the estimate inside MOE_CHOICE_ROWS; never for the fused L1)."""
    return (not fused and MOE_CHOICE_ROWS is not None
            and MOE_CHOICE_ROWS[0] < rows_per_expert <= MOE_CHOICE_ROWS[1])


def check_grouped_config(c, out_dtype: str | None = None, num_groups: int | None = None,
                         precise_fp32: bool = True, desc: GemmDesc | None = None) -> None:
    """A forced grouped tile (grouped_matmul_*(config=)): General with 128-row tiles, SwapAB or Wg3
    with valid knobs; with the problem's output, groups and promotion, also its shared memory
    beside the tile prefix, and for Wg3 an output it writes. ValueError naming the rule
    otherwise."""
    if type(c) not in GROUPED_TILES:
        raise ValueError(f"config must be a General, SwapAB, Wg3 or Dense descriptor for a grouped GEMM; got {c!r}")
    if type(c) in (General, SwapAB) and c.block_m != BLOCK_M:
        raise ValueError(f"config: the grouped mode runs 128-row tiles, not block_m={c.block_m}")
    if getattr(c, "splits", 1) != 1 and type(c) is General:
        raise ValueError(f"config: the grouped General tiles take no K split (splits={c.splits})")
    if type(c) is Dense and c.grouped_ok():
        raise ValueError(f"config {c.label()}: {c.grouped_ok()}")
    if out_dtype is None:
        return
    if type(c) is Dense:
        if out_dtype == "float32" and precise_fp32:
            raise ValueError(f"config: {c.label()} promotes per 128-wide K block; fp32 output needs precise_fp32=False")
        if desc is not None and not c.is_valid(replace(desc, out_dtype="bfloat16") if out_dtype == "float32" else desc):
            raise ValueError(f"config {c.label()} is not valid for N={desc.n} K={desc.k} {desc.out_dtype}")
        k = desc.k if desc is not None else 4096
        if c.grouped_smem_bytes(out_dtype, num_groups, k, False) > MAX_SMEM_PER_BLOCK:
            raise ValueError(f"config {c.label()}: {c.grouped_smem_bytes(out_dtype, num_groups, k, False)} bytes of "
                             f"shared memory with a {num_groups}-group tile prefix, over the {MAX_SMEM_PER_BLOCK} a "
                             f"CTA may have")
        return
    coarse = type(c) is Wg3
    if coarse and out_dtype == "float32" and precise_fp32:
        raise ValueError(f"config: {c.label()} promotes per 128-wide K block; fp32 output needs precise_fp32=False")
    # Wg3: its plain-mode validity counts the TMA-store staging and refuses fp32, neither of which
    # applies to the grouped mode (direct stores, fp32 when not precise); its knobs are checked
    # alone, the grouped shared memory next.
    if desc is not None and not (c.knobs_valid(desc) if coarse else c.is_valid(desc)):
        raise ValueError(f"config {c.label()} is not valid for N={desc.n} K={desc.k} {desc.out_dtype}")
    if c.grouped_smem_bytes(out_dtype, num_groups) > MAX_SMEM_PER_BLOCK:
        raise ValueError(f"config {c.label()}: {c.grouped_smem_bytes(out_dtype, num_groups)} bytes of shared memory "
                         f"with a {num_groups}-group tile prefix, over the {MAX_SMEM_PER_BLOCK} a CTA may have")


def candidate(n: int, k: int, out_dtype: str, num_groups: int, rows_per_group: float | None = None,
              active_groups: int | None = None, num_sms: int = DEFAULT_NUM_SMS, precise_fp32: bool = True,
              wg3: bool | None = None, dense_ok: bool = True) -> Candidate:
    """The tile of a grouped GEMM over ``num_groups`` weight matrices [N, K].

    ``rows_per_group``: about how many rows a non-empty group holds (None: unknown, many). Up to
    SWAP_MAX_ROWS (decode): swap-AB, so no MMA row is wasted and the weights stream once; then K
    splits when the tiles of ``active_groups`` would leave over half the SMs idle (the plain
    kernel's rule). In WG3_ROWS: the three-warpgroup kernel's 192-row tiles (bf16 / fp16 out,
    or fp32 when not ``precise_fp32``: it promotes per 128-wide K block only). Otherwise 128-row
    token tiles and block_n 128 (the smallest tile holding N below that). ``wg3`` True / False:
    the 192-row tiles (where the output allows them) / never, whatever the estimate (fp8gemm.moe's
    device-side choice). With FP8GEMM_GROUPED_DENSE=1 (lab), the dense kernel's pairs sharing an
    expert's weights instead of the 128-row tiles, where ``dense_ok`` (the As TMA can read
    K-major). Stages: as many as shared memory holds beside the tile prefix."""
    if not 1 <= num_groups <= MAX_GROUPS:
        raise ValueError(f"grouped GEMM takes 1..{MAX_GROUPS} groups; got {num_groups}")
    window = WG3_ROWS
    in_window = window is not None and rows_per_group is not None and window[0] < rows_per_group <= window[1]
    if (out_dtype != "float32" or not precise_fp32) and (in_window if wg3 is None else wg3):
        for stages in range(MAX_STAGES, 1, -1):
            c = Wg3(128, stages, 8, reason=f"grouped: 192-row tiles (about {rows_per_group or 0:.3g} rows per "
                                           f"group), stages={stages}")
            if c.grouped_smem_bytes(out_dtype, num_groups) <= MAX_SMEM_PER_BLOCK:
                return c
    if (GROUPED_DENSE and dense_ok and dense.K_MAJOR_SWITCH and wg3 is not True and (out_dtype != "float32" or not precise_fp32)
            and cdiv(k, BLOCK_K) % 4 == 0 and (rows_per_group is None or rows_per_group > SWAP_MAX_ROWS)):
        c = Dense(128, 128, 5, 2, 0, 2, reason="grouped: dense 128 x 128, pairs of an expert's row tiles sharing "
                                               "its weights (FP8GEMM_GROUPED_DENSE=1)")
    elif rows_per_group is not None and rows_per_group <= SWAP_MAX_ROWS:
        block_n = next(b for b in SWAP_BLOCK_NS if b >= rows_per_group)
        active = max(1, min(num_groups, active_groups or num_groups))
        tiles = active * cdiv(n, BLOCK_M)
        # NOTES: the plain kernel's rule (SMs half idle). Splitting 6 experts x 32 tiles in two
        # to even out 1.5 waves measured slower (flash L1 / L2 at one token: 34.8 / 23.1 us
        # against 31.3 / 17.9 unsplit; bench/NOTES.md).
        splits = split_count(tiles, cdiv(k, BLOCK_K), num_sms)
        # NOTES: one token of V4-Flash is 6 experts x 32 tiles, 1.45 waves: the last wave's tiles
        # split in two (TAIL_SPLIT) finish the GEMM in 1.5 tile times instead of 2.
        if splits == 1 and tail_split_pays(tiles, num_sms) and cdiv(k, BLOCK_K) >= 16:
            splits = TAIL_SPLIT
        c = SwapAB(block_n, MAX_STAGES, 1, splits,
                   reason=f"grouped: swap-AB, token tile {block_n} (about {rows_per_group:.3g} rows per group), "
                          f"splits={'the last wave' if splits == TAIL_SPLIT else splits} for about {tiles} tiles")
    else:
        block_n = next((b for b in BLOCK_NS if b >= n), BLOCK_NS[-1])
        c = General(block_n, MAX_STAGES, 8, 1, reason=f"grouped: block_n={block_n}")
    for stages in range(MAX_STAGES, 1, -1):
        if replace(c, stages=stages).grouped_smem_bytes(out_dtype, num_groups) <= MAX_SMEM_PER_BLOCK:
            return replace(c, stages=stages, reason=f"{c.reason}, stages={stages} beside a {num_groups}-group "
                                                    f"tile prefix")
    raise AssertionError("unreachable: two stages and 8192 groups fit")


# The fused SwiGLU L1 of fp8gemm.moe (general kernel template kSwiGLU): 128 token rows x (64 gate +
# 64 up) weight rows per stage, two sub-tiles per work unit, sub-tile 0's act values and row amax
# held in shared memory (34 floats per consumer thread: kernels_cu/swiglu_epilogue.cuh).
SWIGLU_ACT_COLS = 64                    # act columns per sub-tile: the B boxes' rows
SWIGLU_HOLD_BYTES = 2 * 128 * 34 * 4


@dataclass(frozen=True)
class SwiGLU(Candidate):
    """fp8gemm.moe's fused L1: the general kernel's contiguous grouped mode on 128 x 128 tiles whose
    epilogue writes act = SwiGLU(h) in FP8 and its per-128 scales instead of h."""

    variant = General.variant
    stages: int = MAX_STAGES

    def smem_bytes(self, out_dtype: str = "float32", num_groups: int = 1) -> int:
        return ring_smem_bytes(128, self.stages, SWIGLU_HOLD_BYTES) + prefix_bytes(num_groups)

    def template_args(self) -> tuple:
        """The general kernel's <128, stages, fp32, 8, no fine promotion, no TMA store, grouped,
        kSwiGLU>."""
        return General(128, self.stages, 8, 1).template_args("float32", False, False, True, swiglu=True)

    def label(self) -> str:
        return f"swiglu 128x128 s{self.stages}"

    @classmethod
    def fallback(cls, num_groups: int) -> SwiGLU:
        """As many stages as fit beside the act hold and the tile prefix."""
        for stages in range(MAX_STAGES, 1, -1):
            if cls(stages).smem_bytes("float32", num_groups) <= MAX_SMEM_PER_BLOCK:
                return cls(stages, reason=f"fused SwiGLU L1: 128 x (64 gate + 64 up), stages={stages} beside "
                                          f"the act hold and a {num_groups}-group tile prefix")
        raise AssertionError("unreachable: two stages and 8192 groups fit")

    def plan_swiglu(self, gp, act_scale_ptr: int, limit: float) -> Plan:
        """The contiguous grouped GEMM of ``gp`` (A = the pairs' rows [P, H], B = w1 [G, 2I, H],
        gate rows then up rows) whose epilogue writes act [P, I] FP8 (``run``'s output pointer,
        row pitch I bytes) and its scales [P, I / 128] at ``act_scale_ptr``. Tiles: 128 rows x
        128 act columns, each run as two sub-tiles of 64 gate + 64 up weight rows (B boxes of 64
        rows)."""
        p = gp.gemm
        inter = p.n // 2
        kern = compiler.get_kernel(p.device, self.variant, self.template_args(), MAX_SMEM_PER_BLOCK)
        tmap_a = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda, BLOCK_M)
        tmap_b = tma.encode_2d_fp8(p.b_ptr, gp.num_groups * p.n, p.k, p.ldb, SWIGLU_ACT_COLS)
        act = replace(p, n=inter)                 # the kernel's N: act columns
        tiles = token_tiles(p.m, BLOCK_M, gp) * (inter // 128)
        check_units(tiles, f"M = {p.m}, N = {p.n}")
        return Plan(act, kern, min(tiles, sm_count(p.device)), threads(BLOCK_M), MAX_SMEM_PER_BLOCK, inter,
                    gemm_args(tmap_a, tmap_b, act, inter) + (
                        ("u32", p.k), ("u32", 1), ("u64", 0), ("u64", 0),
                        ("u64", gp.groups_ptr), ("u32", gp.num_groups), ("u32", 0), ("i64", gp.sb_stride_g),
                        ("u64", act_scale_ptr), ("f32", limit)) + NO_SCALE_MAP,
                    num_tiles=tiles)


def explain_moe(tokens: int, experts: int = 256, hidden: int = 4096, inter: int = 2048, top_k: int = 6,
                fused: bool | None = None, num_sms: int = DEFAULT_NUM_SMS) -> str:
    """What fp8gemm.moe launches for ``tokens`` tokens of a layer (defaults: DeepSeek-V4-Flash)
    and why: the host's estimate of the rows per expert, whether L1 is fused (``fused`` None: the
    layer's default, fused_default), then each grouped GEMM's tile (L1 [2I, H] into an FP32 h, or
    the fused SwiGLU L1; L2 [H, I] into bf16), or the two tiles the routing kernel chooses between
    for each expert from its real count."""
    pairs = tokens * top_k
    per_expert, active = rows_estimate(pairs, experts)
    lines = [f"MoE layer, {tokens} tokens x top-{top_k} = {pairs} pairs over {experts} experts: the host "
             f"estimates {per_expert:.3g} rows per non-empty expert (twice the mean, for uneven routing) on "
             f"{active} experts"]
    if fused is None:
        fused = fused_default(per_expert)
        lines.append(f"  L1 {'fused with' if fused else 'then'} the SwiGLU (the default: fused where the estimate "
                     f"lies in FUSED_ROWS {FUSED_ROWS})")
    choose = device_choice(per_expert, fused)
    gemms = (("L1", 2 * inter, hidden, "float32", False), ("L2", hidden, inter, "bfloat16", True))
    for name, n, k, out, precise in gemms:
        if name == "L1" and fused:
            c = SwiGLU.fallback(experts)
            lines.append(f"  L1 + SwiGLU (fused): {c.describe()} -- {c.reason}")
        elif choose:
            two = [candidate(n, k, out, experts, per_expert, active, num_sms, precise, wg3) for wg3 in (False, True)]
            lines.append(f"  {name} [{n} x {k}] -> {out}: both launch; the routing kernel gives each expert, from "
                         f"its real count, {two[0].describe()} or {two[1].describe()} (the estimate lies in "
                         f"MOE_CHOICE_ROWS {MOE_CHOICE_ROWS})")
        else:
            c = candidate(n, k, out, experts, per_expert, active, num_sms, precise)
            lines.append(f"  {name} [{n} x {k}] -> {out}: {c.describe()} -- {c.reason}")
    return "\n".join(lines)
