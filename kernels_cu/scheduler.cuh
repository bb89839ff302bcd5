// scheduler.cuh: which (m_block, n_block, K range) a persistent CTA works on next.
//
// Work units are (output tile, K split) pairs. A CTA takes units blockIdx.x, blockIdx.x + gridDim.x,
// ... Tiles are numbered in grouped order (kGroupM m-blocks share each n-block sweep, so CTAs
// running together reuse B tiles in L2), and the splits of one tile are consecutive units, so they
// run in the same wave and the last of them can reduce without waiting long.
#pragma once
#include "common/types.cuh"

namespace fp8gemm {

struct WorkUnit {
    uint32_t tile_idx;   // linear tile index (for the split-K workspace)
    uint32_t m_block;
    uint32_t n_block;
    uint32_t split_idx;
    uint32_t kb_begin;   // first 128-wide K block of this split
    uint32_t kb_end;     // one past the last (kb_begin == kb_end: an empty split)
};

template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t BLOCK_K, uint32_t kGroupM>
struct TileScheduler {
    uint32_t num_m_blocks, num_n_blocks, num_tiles, num_splits, num_units;
    uint32_t num_k_blocks, kb_per_split;

    __device__ __forceinline__ TileScheduler(uint32_t M, uint32_t N, uint32_t K, uint32_t splits) {
        num_m_blocks = (M + BLOCK_M - 1) / BLOCK_M;
        num_n_blocks = (N + BLOCK_N - 1) / BLOCK_N;
        num_tiles = num_m_blocks * num_n_blocks;
        num_splits = splits;
        num_units = num_tiles * splits;
        num_k_blocks = (K + BLOCK_K - 1) / BLOCK_K;
        kb_per_split = (num_k_blocks + splits - 1) / splits;
    }

    __device__ __forceinline__ WorkUnit unit(uint32_t u) const {
        WorkUnit w;
        w.tile_idx = u / num_splits;
        w.split_idx = u % num_splits;
        // Grouped rasterization of the tile index.
        const uint32_t tiles_per_group = kGroupM * num_n_blocks;
        const uint32_t first_m_block = (w.tile_idx / tiles_per_group) * kGroupM;
        const uint32_t group_m = min(num_m_blocks - first_m_block, kGroupM);
        const uint32_t idx_in_group = w.tile_idx % tiles_per_group;
        w.m_block = first_m_block + idx_in_group % group_m;
        w.n_block = idx_in_group / group_m;
        w.kb_begin = min(w.split_idx * kb_per_split, num_k_blocks);
        w.kb_end = min(w.kb_begin + kb_per_split, num_k_blocks);
        return w;
    }
};

}  // namespace fp8gemm
