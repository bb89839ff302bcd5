"""``Tall`` (sm90_fp8_gemm_tall): 256-row tiles, the general kernel's two consumer warpgroups each
running two 64-row waves over every B stage; coarse promotion, no split, no swap-AB; a plain mode
(bf16 / fp16 out) and a grouped mode (MoE prefill; fp32 out too when not precise).

Each B stage feeds 256 token rows, so an expert of up to 256 rows reads each weight tile once,
and a wave whose rows all lie past the tile's group (or M) is skipped. The host side is Wg3's
(same arguments but the As map, same knobs); three warps of the producer warpgroup load each
stage's scales into shared memory beside it (kernels_cu/sm90_fp8_gemm_tall.cu). The dispatcher
does not choose it on its own yet: ``config=`` forces it (the lab measures it against General and
Wg3, bench/NOTES.md)."""
from __future__ import annotations

from dataclasses import dataclass

from .general import staging_bytes
from .variant import DEFAULT_NUM_SMS, FLAG, GemmDesc
from .wg3 import Wg3

BLOCK_M = 256
WAVE_ROWS = 128              # one A box: the rows both consumer warpgroups cover in one wave
THREADS = 384                # producer + two consumer warpgroups
STAGES = 3                   # the most that fit beside the TMA-store staging at block_n = 128
MIN_STAGES = 3               # as many as the scale warps (fewer: two warps, and their loop spilled at 40 registers)
SLOT_BYTES = (BLOCK_M + 32) * 4   # per stage: the scale warps' As column and Bs (128-byte padded)


@dataclass(frozen=True)
class Tall(Wg3):
    """256 x block_n tiles, ``stages`` ring buffers, tile rows rastered in groups of ``group_m``,
    the scales by ``scale_slots`` (1) or by the consumers' loads (0), the K loop per wave count
    (``one_loop`` 0) or one loop running both waves always (1)."""

    variant = "sm90_fp8_gemm_tall"
    stages: int = STAGES
    scale_slots: int = 1          # 1: scales through the scale warps' slots; 0: the consumers' own loads
    one_loop: int = 0             # 1: one K loop, both waves always (a dead wave computed, not stored)

    block_m = BLOCK_M
    threads = THREADS
    a_box_rows = WAVE_ROWS
    as_map_arg = False

    def ring_bytes(self) -> int:
        """Wg3's ring on 256-row tiles, with the scale slots beside the stages."""
        return super().ring_bytes() + self.stages * SLOT_BYTES

    def smem_bytes(self, out_dtype: str = "bfloat16", slots_a: bool = False) -> int:
        """The ring (with its scale slots) and the two warpgroups' TMA-store staging (64 rows each;
        both waves reuse it). ``slots_a``: Wg3's TMA-filled As slots, which this kernel has not."""
        return self.ring_bytes() + staging_bytes(self.block_n, out_dtype, WAVE_ROWS)

    def knobs_valid(self, desc: GemmDesc) -> bool:
        """Wg3's rules, at least MIN_STAGES, and a scale source of the two."""
        return (super().knobs_valid(desc) and self.stages >= MIN_STAGES and self.scale_slots in (0, 1)
                and self.one_loop in (0, 1))

    def template_args(self, out_dtype: str, tma_store: bool, grouped: bool, slots_a: bool = False) -> tuple:
        """<BLOCK_N, kNumStages, kOutType, kGroupM, kTmaStore[, kGrouped[, kScaleSlots[, kOneLoop]]]>
        (the defaulted ones named only when set; ``slots_a`` as in smem_bytes)."""
        head = Wg3.template_args(self, out_dtype, tma_store, grouped)
        if self.one_loop:
            return head[:5] + (FLAG[grouped], FLAG[bool(self.scale_slots)], "true")
        return head if self.scale_slots else head[:5] + (FLAG[grouped], "false")

    def label(self) -> str:
        return super().label() + ("" if self.scale_slots else " loads") + (" one-loop" if self.one_loop else "")

    def as_slots(self, p) -> bool:
        """No TMA-filled As slots (Wg3's): the scale warps fill this kernel's own (scale_slots)."""
        return False

    @classmethod
    def fallback(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS, reason: str = "") -> Tall:
        if desc.out_dtype == "float32":
            raise ValueError(f"variant {cls.variant} writes bf16 or fp16 only, not {desc.out_dtype}")
        return cls(128, STAGES, cls.group_for(desc), reason=reason or f"tall: 256 x 128 tiles, {STAGES} stages")

    @classmethod
    def estimate_us(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS) -> float:
        raise NotImplementedError("the 256-row tiles have no time model yet: they run only when forced")

    @classmethod
    def tuner_candidates(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS) -> list:
        """None yet: the tuner does not time it until the lab shows where it wins."""
        return []
