"""``Wg3`` (sm90_fp8_gemm_wg3): the general kernel's plain loop with three consumer warpgroups:
192-row tiles, coarse promotion (bf16 / fp16 out), no split, no swap-AB; a grouped mode for MoE
prefill. NOTES (bench/NOTES.md): at large M it ran 4-8% faster per tile than the general
kernel's 128 x 128 (8192 x 8192 x 4096: 421 vs 457 us), but its taller tiles quantize worse:
4096^3 (5.3 waves of 192-row tiles) ran 4% slower."""
from __future__ import annotations

from dataclasses import dataclass

from .. import compiler, tma
from ..dtypes import KERNEL_TYPE_IDS, OUT_BYTES
from ..hw import MAX_SMEM_PER_BLOCK
from ..launcher import Plan, check_units, gemm_args, group_args, sm_count, tma_store_ok, token_tiles
from .general import (BARRIER_BYTES, HBM_BYTES_PER_US, SM_FLOPS_PER_US, m_major_as_fits, m_major_as_map,
                      prefix_bytes, staging_bytes)
from .variant import BLOCK_K, DEFAULT_NUM_SMS, FLAG, Candidate, GemmDesc, cdiv

BLOCK_M = 192
THREADS = 512                # producer + three consumer warpgroups
BLOCK_NS = (64, 128)
STAGES = 3                   # measured faster than 4 at 5 of 7 large shapes (bench/NOTES.md)
MIN_M = 256                  # the fallback's floor (below it one 128-row tile does)


def rate_gain(k: int) -> float:
    """Its tile rate over the general kernel's 128 x 128, wave quantization aside: 1.05 + 0.5 / K
    blocks, fitted to the tuner's run at M >= 8192 (K = 256: 1.28-1.33, K = 1024: 1.13-1.16,
    K = 4096: 1.07-1.09); short K gains most, where the general kernel's per-tile epilogue and
    pipeline fill are a larger share and the third warpgroup overlaps them."""
    return 1.05 + 0.5 / cdiv(k, BLOCK_K)


def cost_us(m: int, n: int, k: int, num_sms: int) -> float:
    """general.cost_us's estimate for 192 x 128 tiles, the tensor-core term sped up by rate_gain."""
    k_blocks = cdiv(k, BLOCK_K)
    waves = cdiv(cdiv(m, BLOCK_M) * cdiv(n, 128), num_sms)
    unique = (m + n) * k + 2 * m * n
    flops = waves * k_blocks * 2.0 * BLOCK_M * 128 * BLOCK_K
    return max(unique / HBM_BYTES_PER_US, flops / SM_FLOPS_PER_US / rate_gain(k))


@dataclass(frozen=True)
class Wg3(Candidate):
    """192 x block_n tiles, ``stages`` ring buffers, tile rows rastered in groups of ``group_m``."""

    variant = "sm90_fp8_gemm_wg3"
    block_n: int = 128
    stages: int = STAGES
    group_m: int = 8

    block_m = BLOCK_M
    threads = THREADS
    a_box_rows = BLOCK_M          # rows of one TMA box of A
    as_map_arg = True             # the kernel's last argument: the As tensor map (kSlotsA)

    def ring_bytes(self) -> int:
        return 1024 + self.stages * (self.block_m + self.block_n) * BLOCK_K + BARRIER_BYTES * self.stages

    def smem_bytes(self, out_dtype: str = "bfloat16", slots_a: bool = False) -> int:
        """The ring, three warpgroups' TMA-store staging and (``slots_a``) a stage's As slot of
        a float per tile row."""
        return (self.ring_bytes() + staging_bytes(self.block_n, out_dtype) * 3 // 2
                + (self.stages * BLOCK_M * 4 if slots_a else 0))

    def grouped_smem_bytes(self, out_dtype: str, num_groups: int) -> int:
        """The grouped mode stores directly: no staging."""
        return self.ring_bytes() + prefix_bytes(num_groups)

    def knobs_valid(self, desc: GemmDesc) -> bool:
        """The rules other than the output type and shared memory (the grouped mode's check)."""
        return self.block_n in BLOCK_NS and self.stages >= 2 and self.group_m >= 1 and desc.shape_ok()

    def is_valid(self, desc: GemmDesc) -> bool:
        return (self.knobs_valid(desc) and desc.out_dtype != "float32"
                and self.smem_bytes(desc.out_dtype) <= MAX_SMEM_PER_BLOCK)

    def label(self) -> str:
        return f"{self.variant.rsplit('_', 1)[1]} {self.block_m}x{self.block_n} s{self.stages} g{self.group_m}"

    def template_args(self, out_dtype: str, tma_store: bool, grouped: bool, slots_a: bool = False) -> tuple:
        """<BLOCK_N, kNumStages, kOutType, kGroupM, kTmaStore[, kGrouped[, kSlotsA]]> (the
        defaulted ones named only when set)."""
        head = (self.block_n, self.stages, KERNEL_TYPE_IDS[out_dtype], self.group_m, FLAG[tma_store])
        if slots_a:
            return head + (FLAG[grouped], "true")
        return head + (("true",) if grouped else ())

    def as_slots(self, p) -> bool:
        """Whether the plain mode reads As from stage slots filled by TMA: an M-major As with a
        16-byte aligned base and column stride, at least a tile of rows, and room for the slots
        (general.scale_source's rule, NOTES there)."""
        return m_major_as_fits(p, BLOCK_M) and self.smem_bytes(p.out_dtype, True) <= MAX_SMEM_PER_BLOCK

    def plan(self, p, ldc: int, out_aligned: bool) -> Plan:
        return self._plan(p, ldc, out_aligned, None)

    def plan_grouped(self, gp, ldc: int, out_aligned: bool, precise_fp32: bool = True) -> Plan:
        """The grouped mode (MoE prefill at 129-192 rows per group; fp32 out with per-block
        promotion when the caller allows it), direct stores; the plan holds only bounds, as the
        general kernel's grouped mode."""
        return self._plan(gp.gemm, ldc, out_aligned, gp)

    def _plan(self, p, ldc: int, out_aligned: bool, gp) -> Plan:
        store = gp is None and tma_store_ok(p.n, self.block_n, OUT_BYTES[p.out_dtype], ldc, out_aligned)
        slots = gp is None and self.as_slots(p)
        smem = self.smem_bytes(p.out_dtype, slots) if gp is None else self.grouped_smem_bytes(p.out_dtype, gp.num_groups)
        kern = compiler.get_kernel(p.device, self.variant, self.template_args(p.out_dtype, store, gp is not None, slots),
                                   smem if gp is None else MAX_SMEM_PER_BLOCK)
        weights = p.n * (gp.num_groups if gp is not None else 1)
        tmap_a = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda, self.a_box_rows)
        tmap_b = tma.encode_2d_fp8(p.b_ptr, weights, p.k, p.ldb, self.block_n)
        tiles = token_tiles(p.m, self.block_m, gp) * cdiv(p.n, self.block_n)
        check_units(tiles, f"M = {p.m}, N = {p.n}")
        tail = ()
        if self.as_map_arg:
            tail = (("desc", m_major_as_map(p, self.block_m) if slots else tma.ZERO_DESCRIPTOR),)
        return Plan(p, kern, min(tiles, sm_count(p.device)), self.threads, smem, ldc,
                    gemm_args(tmap_a, tmap_b, p, ldc) + (("u32", p.k),) + group_args(gp) + tail,
                    tma_store=store, num_tiles=tiles)

    @staticmethod
    def group_for(desc: GemmDesc) -> int:
        """Raster group 8 where B is large (N * K >= 32 Mi: 8192 x 4096 won by 6-7%), else 1 (won
        29 of the 38 shapes the tuner gave this kernel, by up to 10%)."""
        return 8 if desc.n * desc.k >= 32 << 20 else 1

    @classmethod
    def fallback(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS, reason: str = "") -> Wg3:
        if desc.out_dtype == "float32":
            raise ValueError(f"variant {cls.variant} writes bf16 or fp16 only, not {desc.out_dtype}")
        return cls(128, STAGES, cls.group_for(desc), reason=reason or f"wg3: 192 x 128 tiles, {STAGES} stages")

    @classmethod
    def estimate_us(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS) -> float:
        return cost_us(desc.m, desc.n, desc.k, num_sms)

    @classmethod
    def tuner_candidates(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS) -> list:
        """Pipeline depth and raster group, from MIN_M rows (bf16 / fp16 out). NOTES: tried from
        MIN_M / 4 before, it was never within 3% of the best on the 84 trace shapes with 64 <= M <=
        256 (bench/NOTES.md), and took 3 of the 16 candidate slots there."""
        if desc.m < MIN_M or desc.out_dtype == "float32":
            return []
        return [cls(128, s, g) for s, g in ((STAGES, 8), (STAGES, 1), (4, 8))]
