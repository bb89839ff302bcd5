"""``Gemv`` (sm90_fp8_gemm_gemv): decode, M <= 16. One CTA of ``warps`` warps per 16 weight rows
over all of K (warp-level MMA, the K blocks shared by the CTA's warps, reduced in shared memory),
``unroll`` K blocks per warp loaded at once; tokens on a ``token_tile`` of 8 or 16."""
from __future__ import annotations

from dataclasses import dataclass

from .. import compiler, tma
from ..dtypes import KERNEL_TYPE_IDS
from ..launcher import Plan, check_grid, gemm_args
from .short_k import MAX_K as SHORT_K_MAX_K
from .variant import DEFAULT_NUM_SMS, Candidate, GemmDesc, cdiv

ROWS = 16                      # weight rows per CTA
TOKEN_TILES = (8, 16)
WARPS = (4, 8)
UNROLLS = (1, 2, 4)
MAX_M = 8                      # the fallback's rule (takes); the table may pick it up to 16
MAX_N = 4096
MAX_MN = 16384


@dataclass(frozen=True)
class Gemv(Candidate):
    variant = "sm90_fp8_gemm_gemv"
    token_tile: int = 8
    warps: int = 4
    unroll: int = 2

    block_m = ROWS

    def smem_bytes(self, out_dtype: str = "bfloat16") -> int:
        """Static shared memory only (the warps' partial sums): no dynamic bytes."""
        return 0

    def is_valid(self, desc: GemmDesc) -> bool:
        return (self.token_tile in TOKEN_TILES and self.warps in WARPS and self.unroll in UNROLLS
                and desc.shape_ok() and desc.m <= self.token_tile)

    def label(self) -> str:
        return f"gemv {ROWS}x{self.token_tile} w{self.warps} u{self.unroll}"

    def template_args(self, out_dtype: str) -> tuple:
        """<kTokenTiles (of 8), kWarps, kUnroll, kOutType>"""
        return self.token_tile // 8, self.warps, self.unroll, KERNEL_TYPE_IDS[out_dtype]

    def plan(self, p, ldc: int, out_aligned: bool) -> Plan:
        """Plain loads (no tensor maps: the argument block's maps stay zero), no workspace; the
        argument block starts as every GEMM kernel's, so ``run`` is shared."""
        kern = compiler.get_kernel(p.device, self.variant, self.template_args(p.out_dtype), 0)
        ctas = cdiv(p.n, ROWS)
        check_grid(ctas, f"N = {p.n}")
        return Plan(p, kern, ctas, 32 * self.warps, 0, ldc,
                    gemm_args(tma.ZERO_DESCRIPTOR, tma.ZERO_DESCRIPTOR, p, ldc) + (
                        ("u64", p.a_ptr), ("i64", p.lda), ("u64", p.b_ptr), ("i64", p.ldb), ("u32", p.k)),
                    num_tiles=ctas)

    @staticmethod
    def takes(desc: GemmDesc) -> bool:
        """The fallback's choice of the decode kernel: K > 256, M <= 8, N <= 4096 and M * N <= 16384.
        NOTES: measured against the dispatcher's swap-AB / short-K picks (lab/exp_gemv.py, H200):
        0.57-0.99x their time at M <= 4 and N <= 4096 with K >= 1024 (no split-K handshake),
        0.6-0.98x at M = 8 up to N = 2048; slower at N = 8192 (1.02-1.48x: the TMA swap-AB stream
        wins when every SM has tiles), at M = 8 with N = 4096 (0.97-1.09x), at K = 256 (the
        short-K kernel, 1.04-1.2x) and mostly at M = 16."""
        return desc.k > SHORT_K_MAX_K and desc.m <= MAX_M and desc.n <= MAX_N and desc.m * desc.n <= MAX_MN

    @classmethod
    def fallback(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS, reason: str = "") -> Gemv:
        """The narrowest token tile holding M; 4 warps with 2 K blocks each in flight up to K = 2048,
        8 warps with 1 beyond. NOTES: the tuner's winners on the trace's M <= 16 shapes: (4, 2) at
        K = 256 / 1024, (8, 1) at K = 4096."""
        if desc.m > TOKEN_TILES[-1]:
            raise ValueError(f"variant {cls.variant} takes M <= {TOKEN_TILES[-1]}, not M = {desc.m}")
        tile = 8 if desc.m <= 8 else 16
        warps, unroll = (4, 2) if desc.k <= 2048 else (8, 1)
        return cls(tile, warps, unroll,
                   reason=reason or f"gemv: M={desc.m} <= {tile}, {cdiv(desc.n, ROWS)} CTAs of {ROWS} rows")

    @classmethod
    def tuner_candidates(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS) -> list:
        """The fallback's token tile with the warps x unroll pairs that won somewhere."""
        if desc.m > TOKEN_TILES[-1]:
            return []
        tile = cls.fallback(desc).token_tile
        return [cls(tile, w, u) for w, u in ((8, 2), (8, 1), (4, 2), (4, 4))]
