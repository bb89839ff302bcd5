"""Launcher: a validated problem + a dispatcher candidate -> one kernel launch on a stream.

Stage 4 of matmul. Compiled modules and tensor maps are cached (compiler.py, tma.py); per call this
builds the argument tuple and launches once.
"""
from __future__ import annotations

import numpy as np

from . import compiler, tma
from .validate import GemmProblem

OUT_TYPE_IDS = {"bfloat16": 0, "float16": 1, "float32": 2}   # kernels_cu/common/types.cuh OutType
GENERAL_BLOCK_M = 128
GENERAL_THREADS = 384
MAX_GRID = 2**31 - 1


def launch_general(p: GemmProblem, cand, smem_bytes: int, out_ptr: int, ldc: int, stream) -> None:
    """sm90_fp8_gemm_general: one CTA per 128 x block_n output tile.

    FP32 output promotes after every wgmma (kFinePromotion): the tensor cores' FP8 accumulation
    error (~2e-4) would otherwise exceed FP32's 1e-4 tolerance.
    """
    kern = compiler.get_kernel(p.device, cand.variant,
                               (cand.block_n, cand.stages, OUT_TYPE_IDS[p.out_dtype], cand.group_m,
                                "true" if p.out_dtype == "float32" else "false"),
                               smem_bytes)
    tmap_a = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda, GENERAL_BLOCK_M)
    tmap_b = tma.encode_2d_fp8(p.b_ptr, p.n, p.k, p.ldb, cand.block_n)
    num_tiles = -(-p.m // GENERAL_BLOCK_M) * -(-p.n // cand.block_n)
    if num_tiles > MAX_GRID:
        raise ValueError(f"M = {p.m}, N = {p.n} needs {num_tiles} tiles, over the grid limit {MAX_GRID}")
    args = (tmap_a, tmap_b,
            np.uint64(p.sa_ptr), np.int64(p.sa_stride_m), np.int64(p.sa_stride_k),
            np.uint64(p.sb_ptr), np.int64(p.sb_stride_n), np.int64(p.sb_stride_k),
            np.uint64(out_ptr), np.int64(ldc),
            np.uint32(p.m), np.uint32(p.n), np.uint32(p.k))
    kern.kernel((num_tiles, 1, 1), (GENERAL_THREADS, 1, 1), args, smem_bytes, stream)


LAUNCHERS = {"sm90_fp8_gemm_general": launch_general}
