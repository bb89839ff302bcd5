"""Launcher: a validated problem + a dispatcher candidate -> one kernel launch on a stream.

Stage 4 of matmul. Compiled modules, tensor maps, SM counts and split-K workspaces are cached
(compiler.py, tma.py, here); per call this builds the argument tuple and launches once.
"""
from __future__ import annotations

import threading

import numpy as np

from . import compiler, tma
from .validate import GemmProblem

OUT_TYPE_IDS = {"bfloat16": 0, "float16": 1, "float32": 2}   # kernels_cu/common/types.cuh OutType
OUT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
STORE_CHUNK_BYTES = 128        # one 128B-swizzle chunk of output columns per TMA store box
GENERAL_BLOCK_M = 128
GENERAL_THREADS = 384
MAX_GRID = 2**31 - 1

_lock = threading.Lock()
_sm_counts = {}
_workspaces = {}      # (device, stream) -> (float32 workspace, uint32 tile counters)


def sm_count(device: int) -> int:
    n = _sm_counts.get(device)
    if n is None:
        import cupy

        n = cupy.cuda.Device(device).attributes["MultiProcessorCount"]
        _sm_counts[device] = n
    return n


def split_workspace(device: int, stream_ptr: int, floats: int, tiles: int):
    """(workspace pointer, counters pointer) with room for ``floats`` partial sums and ``tiles``
    counters, private to one stream (concurrent launches on one stream are ordered).

    NOTES: counters must be zero before a launch; the kernel's last split resets its tile's
    counter, so zeroing happens once here, at allocation (then a device sync, so that a launch on
    another stream cannot overtake the memset).
    """
    key = (device, stream_ptr)
    ws = _workspaces.get(key)
    if ws is None or ws[0].size < floats or ws[1].size < tiles:
        import cupy

        with _lock, cupy.cuda.Device(device):
            old = _workspaces.get(key)
            f = max(floats, old[0].size if old else 0)
            t = max(tiles, old[1].size if old else 0)
            ws = (cupy.empty(f, dtype=cupy.float32), cupy.zeros(t, dtype=cupy.uint32))
            cupy.cuda.Device(device).synchronize()
            _workspaces[key] = ws
    return ws[0].data.ptr, ws[1].data.ptr


def launch_general(p: GemmProblem, cand, smem_bytes: int, out_ptr: int, ldc: int, stream) -> None:
    """sm90_fp8_gemm_general: a persistent grid over (128 x block_n tile, K split) work units;
    swap-AB runs the same kernel on C^T = B A^T (weights 128 rows a tile, tokens block_n).

    FP32 output promotes after every wgmma (kFinePromotion): the tensor cores' FP8 accumulation
    error (~2e-4) would otherwise exceed FP32's 1e-4 tolerance. The epilogue stores through TMA
    (kTmaStore) when C's base and row pitch are 16-byte aligned and a tile row is whole 128-byte
    chunks; otherwise it stores from registers.
    """
    esize = OUT_BYTES[p.out_dtype]
    tma_store = (not cand.swap_ab and (cand.block_n * esize) % STORE_CHUNK_BYTES == 0
                 and out_ptr % 16 == 0 and (ldc * esize) % 16 == 0)
    kern = compiler.get_kernel(p.device, cand.variant,
                               (cand.block_n, cand.stages, OUT_TYPE_IDS[p.out_dtype], cand.group_m,
                                "true" if p.out_dtype == "float32" else "false",
                                "true" if tma_store else "false",
                                "true" if cand.swap_ab else "false"),
                               smem_bytes)
    # Tile space rows x cols: C (M x N), or C^T (N x M) under swap-AB, whose wgmma A operand is B.
    if cand.swap_ab:
        rows, cols = p.n, p.m
        tmap_a = tma.encode_2d_fp8(p.b_ptr, p.n, p.k, p.ldb, GENERAL_BLOCK_M)
        tmap_b = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda, cand.block_n)
    else:
        rows, cols = p.m, p.n
        tmap_a = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda, GENERAL_BLOCK_M)
        tmap_b = tma.encode_2d_fp8(p.b_ptr, p.n, p.k, p.ldb, cand.block_n)
    tmap_c = (tma.encode_2d(out_ptr, p.m, p.n, ldc * esize, 64, STORE_CHUNK_BYTES // esize, esize)
              if tma_store else tma.ZERO_DESCRIPTOR)
    num_tiles = -(-rows // GENERAL_BLOCK_M) * -(-cols // cand.block_n)
    splits = max(1, min(cand.splits, -(-p.k // 128)))
    units = num_tiles * splits
    if units > MAX_GRID:
        raise ValueError(f"M = {p.m}, N = {p.n} needs {units} work units, over the limit {MAX_GRID}")
    ws_ptr = counters_ptr = 0
    if splits > 1:
        ws_ptr, counters_ptr = split_workspace(p.device, stream.ptr,
                                               units * GENERAL_BLOCK_M * cand.block_n, num_tiles)
    grid = min(units, sm_count(p.device))
    args = (tmap_a, tmap_b, tmap_c,
            np.uint64(p.sa_ptr), np.int64(p.sa_stride_m), np.int64(p.sa_stride_k),
            np.uint64(p.sb_ptr), np.int64(p.sb_stride_n), np.int64(p.sb_stride_k),
            np.uint64(out_ptr), np.int64(ldc),
            np.uint32(p.m), np.uint32(p.n), np.uint32(p.k),
            np.uint32(splits), np.uint64(ws_ptr), np.uint64(counters_ptr))
    kern.kernel((grid, 1, 1), (GENERAL_THREADS, 1, 1), args, smem_bytes, stream)


LAUNCHERS = {"sm90_fp8_gemm_general": launch_general}
