"""``ShortK`` (sm90_fp8_gemm_short_k): K <= 256, one CTA per block_m x block_n tile of C, block_m /
64 consumer warpgroups, both K blocks loaded at once (no pipeline, no persistent loop)."""
from __future__ import annotations

from dataclasses import dataclass

from .. import compiler, tma
from ..dtypes import KERNEL_TYPE_IDS, OUT_BYTES
from ..hw import MAX_SMEM_PER_BLOCK
from ..launcher import Plan, check_grid, gemm_args, tma_store_ok
from .general import staging_bytes
from .variant import BLOCK_K, DEFAULT_NUM_SMS, FLAG, Candidate, GemmDesc, cdiv

MAX_K = 256                             # two 128-wide K blocks, both loaded at once
BLOCK_MS = (64, 128)                    # one or two consumer warpgroups
BLOCK_NS = (16, 32, 64, 128)
MAX_TILES_PER_SM = 8    # beyond this many 64 x 64 tiles per SM the persistent kernel wins
MIN_TILES = 24          # narrower tiles below this many (more CTAs loading B at once)


@dataclass(frozen=True)
class ShortK(Candidate):
    variant = "sm90_fp8_gemm_short_k"
    block_m: int = 64
    block_n: int = 64

    def smem_bytes(self, out_dtype: str = "bfloat16") -> int:
        """Both K blocks of A and B, the TMA-store staging of block_m / 64 warpgroups, 2 barriers
        (sized for K = 256; a K <= 128 launch leaves the second block unused)."""
        staging = staging_bytes(self.block_n, out_dtype) * self.block_m // 128
        return 1024 + 2 * (self.block_m + self.block_n) * BLOCK_K + staging + 16

    def is_valid(self, desc: GemmDesc) -> bool:
        return (self.block_m in BLOCK_MS and self.block_n in BLOCK_NS
                and self.smem_bytes(desc.out_dtype) <= MAX_SMEM_PER_BLOCK
                and desc.shape_ok() and desc.k <= MAX_K)

    def label(self) -> str:
        return f"short_k {self.block_m}x{self.block_n}"

    def template_args(self, out_dtype: str, k: int, tma_store: bool) -> tuple:
        """<BLOCK_M, BLOCK_N, kNumKBlocks, kOutType, kFinePromotion, kTmaStore>"""
        return (self.block_m, self.block_n, cdiv(k, BLOCK_K), KERNEL_TYPE_IDS[out_dtype],
                FLAG[out_dtype == "float32"], FLAG[tma_store])

    def plan(self, p, ldc: int, out_aligned: bool) -> Plan:
        """Same argument block as every GEMM kernel up to N (no splits, no workspace)."""
        store = tma_store_ok(p.n, self.block_n, OUT_BYTES[p.out_dtype], ldc, out_aligned)
        smem = self.smem_bytes(p.out_dtype)
        kern = compiler.get_kernel(p.device, self.variant, self.template_args(p.out_dtype, p.k, store), smem)
        tmap_a = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda, self.block_m)
        tmap_b = tma.encode_2d_fp8(p.b_ptr, p.n, p.k, p.ldb, self.block_n)
        tiles = cdiv(p.m, self.block_m) * cdiv(p.n, self.block_n)
        check_grid(tiles, f"M = {p.m}, N = {p.n}")
        return Plan(p, kern, tiles, self.block_m // 64 * 128, smem, ldc, gemm_args(tmap_a, tmap_b, p, ldc),
                    tma_store=store, num_tiles=tiles)

    @staticmethod
    def takes(desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS) -> bool:
        """K <= 256 and at most MAX_TILES_PER_SM 64 x 64 tiles per SM. NOTES: from the K = 256
        tuner run (bench/NOTES.md): short-K beat the general kernel, swap-AB included, on every
        trace shape up to 1056 such tiles (by 2-40%), and the persistent general kernel (epilogue
        overlapped with the next tile's loads) won from 1536 tiles up."""
        return desc.k <= MAX_K and cdiv(desc.m, 64) * cdiv(desc.n, 64) <= MAX_TILES_PER_SM * num_sms

    @classmethod
    def fallback(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS) -> ShortK:
        """64 x 64 tiles (narrower for N <= 32), halved in width (to 32, then 16) while fewer than
        MIN_TILES. NOTES: 64 x 64 won or came within 3% on 70 of the 88 K = 256 trace shapes;
        64 x 16 won at N = 512 with M <= 128 (by 2-17%); two-warpgroup tiles (128 rows) lost
        nearly everywhere (bench/NOTES.md)."""
        if desc.k > MAX_K:
            raise ValueError(f"variant {cls.variant} takes K <= {MAX_K}, not K = {desc.k}")
        block_n = 64 if desc.n > 32 else (32 if desc.n > 16 else 16)      # no wider than N needs
        tiles = cdiv(desc.m, 64) * cdiv(desc.n, block_n)
        while tiles < MIN_TILES and block_n > 16:
            block_n //= 2
            tiles = cdiv(desc.m, 64) * cdiv(desc.n, block_n)
        return cls(64, block_n, reason=f"fallback: short-K (K={desc.k} <= {MAX_K}), tile 64x{block_n}: "
                                       f"{tiles} tiles on {num_sms} SMs")

    @classmethod
    def tuner_candidates(cls, desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS) -> list:
        """Every tile no wider than twice N, most area first."""
        if desc.k > MAX_K:
            return []
        return [cls(bm, bn) for bm in BLOCK_MS[::-1] for bn in BLOCK_NS[::-1] if bn <= max(16, 2 * desc.n)]
