// scheduler.cuh: which (m_block, n_block, K range) a persistent CTA works on next.
//
// Work units are (output tile, K split) pairs. A CTA takes units blockIdx.x, blockIdx.x + gridDim.x,
// ... Tiles are numbered in grouped order (kGroupM m-blocks share each n-block sweep, so CTAs
// running together reuse B tiles in L2), and the splits of one tile are consecutive units, so they
// run in the same wave and the last of them can reduce without waiting long.
// Splits: every tile in S (splits >= 1), or (splits == kTailSplit) the tiles of the whole waves
// unsplit and only the last, partial wave's tiles split, as many ways as the grid then fills
// (gridDim.x / those tiles, each split keeping >= 8 K blocks: shorter ones cost more in partials
// than they even out, bench/NOTES.md): 192 tiles on 132 CTAs run as 132
// whole tiles, then 60 tiles in halves: 1.5 tile times instead of 2. Computed on the device (the
// grouped modes know their tile count only there), with two divisions only this mode pays.
#pragma once
#include "common/types.cuh"

namespace fp8gemm {

constexpr uint32_t kTailSplit = 0;   // the ``splits`` that splits only the last wave's tiles (above)

/// a / d for a runtime d >= 1, exact for a < kExactDivLimit (2^21), through the float reciprocal.
/// NOTES: a 32-bit division by a runtime value is ~14 dependent instructions (MUFU.RCP, two
/// conversions, five IMADs and two fix-up steps), and the consumers decode every unit's tile with
/// up to two of them between their epilogue and the next K loop (stamps put the consumers' start
/// a timer tick behind DeepGEMM's, bench/NOTES.md). Here: (a + 1/2) / d = (2a + 1) / 2d lies at
/// least 1/(2d) from every integer, while rcp.approx (1 ulp) and the one rounding of the FFMA
/// leave it within (a + 1/2) / d * 1.5 * 2^-23 of its true value, under 1/(2d) while
/// a + 1/2 < 2^22 / 3: the truncation is the quotient. TileScheduler divides unit and tile indices
/// only, below num_units, which the host keeps under the limit (launcher.check_units). NOTES: a
/// fallback to the integer division for larger indices made 128-row tiles of the tall kernel spill.
constexpr uint32_t kExactDivLimit = 1u << 21;
__device__ __forceinline__ uint32_t div_by_runtime(uint32_t a, uint32_t d) {
    // volatile: hoisted out of the unit loops, the reciprocals stayed live across the K loop and
    // 128-row tiles of the tall kernel spilled; recomputed per unit they cost two instructions.
    float r;
    asm volatile("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(static_cast<float>(d)));
    return static_cast<uint32_t>(__fmaf_rn(static_cast<float>(a), r, 0.5f * r));
}

struct WorkUnit {
    uint32_t tile_idx;   // linear tile index (for the split-K counters)
    uint32_t m_block;
    uint32_t n_block;
    uint32_t split_idx;
    uint32_t num_splits; // this tile's splits (1: unsplit)
    uint32_t ws_slot;    // the split-K workspace slot of the tile's split 0 (its partials follow)
    uint32_t kb_begin;   // first 128-wide K block of this split
    uint32_t kb_end;     // one past the last (kb_begin == kb_end: an empty split)
};

template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t BLOCK_K, uint32_t kGroupM>
struct TileScheduler {
    uint32_t num_m_blocks, num_n_blocks, num_tiles, num_units;
    uint32_t dp_tiles;      // tiles 0 .. dp_tiles - 1 run unsplit (kTailSplit's whole waves; else 0)
    uint32_t num_splits;    // the splits of every tile from dp_tiles on
    uint32_t num_k_blocks, kb_per_split;

    TileScheduler() = default;
    // NOTES: a division by a runtime value is a chain of ~15 dependent uniform-datapath
    // instructions, and the producer's first TMA waits on this constructor and on unit(): with
    // divisions they put ~0.5 us of a ~1.1 us start (an SM-clock trace, bench/NOTES.md). So
    // no split and full raster groups (the common cases) take paths without one.
    __device__ __forceinline__ TileScheduler(uint32_t M, uint32_t N, uint32_t K, uint32_t splits) {
        num_m_blocks = (M + BLOCK_M - 1) / BLOCK_M;
        num_n_blocks = (N + BLOCK_N - 1) / BLOCK_N;
        num_tiles = num_m_blocks * num_n_blocks;
        num_k_blocks = (K + BLOCK_K - 1) / BLOCK_K;
        dp_tiles = 0;
        if (splits == kTailSplit) {
            dp_tiles = num_tiles / gridDim.x * gridDim.x;
            const uint32_t rest = num_tiles - dp_tiles;
            splits = rest == 0 ? 1u : max(1u, min(gridDim.x / rest, num_k_blocks / 8));
        }
        num_splits = splits;
        num_units = dp_tiles + (num_tiles - dp_tiles) * splits;
        kb_per_split = splits == 1 ? num_k_blocks : (num_k_blocks + splits - 1) / splits;
    }

    __device__ __forceinline__ WorkUnit unit(uint32_t u) const {
        WorkUnit w;
        if (num_splits == 1 || u < dp_tiles) {
            w.tile_idx = u;
            w.split_idx = 0;
            w.num_splits = 1;
            w.ws_slot = 0;
        } else {
            const uint32_t v = u - dp_tiles;
            const uint32_t tail_tile = div_by_runtime(v, num_splits);
            w.tile_idx = dp_tiles + tail_tile;
            w.split_idx = v - tail_tile * num_splits;
            w.num_splits = num_splits;
            w.ws_slot = tail_tile * num_splits;      // uniform splits: tile_idx * num_splits
        }
        // Grouped rasterization of the tile index: kGroupM m-blocks per group (fewer in the last).
        // The first group (every tile while num_m_blocks <= kGroupM) and groups of one m-block
        // need no division.
        const uint32_t tiles_per_group = kGroupM * num_n_blocks;
        const uint32_t group = w.tile_idx < tiles_per_group ? 0u : div_by_runtime(w.tile_idx, tiles_per_group);
        const uint32_t first_m_block = group * kGroupM;
        const uint32_t idx_in_group = w.tile_idx - group * tiles_per_group;
        const uint32_t group_m = num_m_blocks - first_m_block;
        if (group_m >= kGroupM) {                            // a full group: a constant divisor
            w.m_block = first_m_block + idx_in_group % kGroupM;
            w.n_block = idx_in_group / kGroupM;
        } else if (group_m == 1) {
            w.m_block = first_m_block;
            w.n_block = idx_in_group;
        } else {
            w.n_block = div_by_runtime(idx_in_group, group_m);
            w.m_block = first_m_block + idx_in_group - w.n_block * group_m;
        }
        const uint32_t kb_per = w.num_splits == 1 ? num_k_blocks : kb_per_split;
        w.kb_begin = min(w.split_idx * kb_per, num_k_blocks);
        w.kb_end = min(w.kb_begin + kb_per, num_k_blocks);
        return w;
    }
};

// ---- grouped GEMM (MoE): row tiles of every group, walked as one tile space ----------------------
// Groups are row ranges of A and C with a weight matrix each. Contiguous layout: groups = offsets
// [G + 1], rows offsets[g]..offsets[g+1]. Masked layout (group_rows > 0): groups = counts [G], rows
// g * group_rows .. + counts[g]. The counts live on the device (no host sync; a CUDA graph replays
// with new counts), so every CTA scans them into a shared-memory prefix of row tiles at start.

struct TileSpan {
    uint32_t row_base, row_end;   // rows of the tile inside C (C^T under swap-AB), and where storing stops
    uint32_t col_base, col_end;   // the same for its columns
    uint32_t group;               // which weight matrix (0 when not grouped)
};

struct TileRows {
    uint32_t row_base;   // first row of the tile (in A and C)
    uint32_t row_end;    // one past the last row the tile may store (its group's end, or M)
    uint32_t group;      // which weight matrix (0 when not grouped)
};

/// How many rows a box of kBoxRows rows starting at row_base moves up so that it ends less than 8
/// rows past a map of map_rows rows: whole 8-row atoms (the 1024-byte alignment a 128B-swizzled
/// wgmma operand needs), at most kMaxShift, and only where the map has that many rows above it (0
/// when the box already fits). NOTES: TMA zero-fills a box's rows past the map, but slowly (the
/// general kernel's grouped GEMM took 1.5x as long with 80 of 128 rows past the end; bench/NOTES.md).
/// The caller's consumers start that many rows into the stage. Shared by GeneralTiles::a_box and the
/// dense kernel (FP8GEMM_DENSE_A_BOX_SHIFT).
template <uint32_t kBoxRows, uint32_t kMaxShift>
__device__ __forceinline__ uint32_t box_shift_rows(uint32_t row_base, uint32_t map_rows) {
    if (row_base + kBoxRows <= map_rows) return 0u;
    const uint32_t over = min((row_base + kBoxRows - map_rows) & ~7u, kMaxShift);
    return over <= row_base ? over : 0u;
}

/// Rows [first, first + rows) of group g, clamped into [0, total_rows): offsets or counts that are
/// out of range or decreasing cannot send a load or a store outside the arrays.
__device__ __forceinline__ void group_extent(const int32_t* groups, uint32_t g, uint32_t group_rows,
                                             uint32_t total_rows, uint32_t& first, uint32_t& rows) {
    if (group_rows == 0) {
        const int32_t lo = min(max(__ldg(groups + g), 0), static_cast<int32_t>(total_rows));
        const int32_t hi = min(max(__ldg(groups + g + 1), lo), static_cast<int32_t>(total_rows));
        first = static_cast<uint32_t>(lo);
        rows = static_cast<uint32_t>(hi - lo);
    } else {
        first = g * group_rows;
        rows = static_cast<uint32_t>(min(max(__ldg(groups + g), 0), static_cast<int32_t>(group_rows)));
    }
}

/// prefix[g] = the first row tile of group g, prefix[G] = all row tiles, computed by warp 0 alone
/// (8 x 32 groups' loads in flight per step, then their scans); the caller's next __syncthreads
/// publishes the result. NOTES (the grouped GEMM alone 5-18% faster at 129-192 rows per
/// expert, lab/exp_moe_prefill.py --wg3): the CTA-wide
/// version (every thread counting groups threadIdx.x, + blockDim.x, ..., then warp 0 scanning)
/// made ptxas build the grouped K loops' wgmma descriptors in vector registers: 96-126 R2UR in
/// the grouped modes against 8-18 in the plain ones (general and wg3 kernels), and 32-40 bytes
/// of spills once wg3's grouped loop was unrolled by 2. With this one: 15-26 R2UR, no spills,
/// wg3's grouped loop unrolled by 2 as the plain one. It costs latency at kernel start:
/// ceil(G / 256) rounds of loads instead of one.
template <uint32_t BLOCK_M>
__device__ __forceinline__ void group_tile_prefix(const int32_t* groups, uint32_t num_groups, uint32_t group_rows,
                                                  uint32_t total_rows, uint32_t* prefix) {
    constexpr uint32_t kBatch = 8;
    if (threadIdx.x >= 32) return;
    const uint32_t lane = threadIdx.x;
    uint32_t carry = 0;
    for (uint32_t base = 0; base < num_groups; base += 32 * kBatch) {
        uint32_t tiles[kBatch];
#pragma unroll
        for (uint32_t j = 0; j < kBatch; ++j) {
            const uint32_t g = base + 32 * j + lane;
            uint32_t first, rows;
            group_extent(groups, min(g, num_groups - 1), group_rows, total_rows, first, rows);
            tiles[j] = g < num_groups ? (rows + BLOCK_M - 1) / BLOCK_M : 0u;
        }
#pragma unroll
        for (uint32_t j = 0; j < kBatch; ++j) {
            const uint32_t g = base + 32 * j + lane;
            uint32_t v = tiles[j];
#pragma unroll
            for (uint32_t d = 1; d < 32; d <<= 1) {
                const uint32_t t = __shfl_up_sync(0xffffffffu, v, d);
                if (lane >= d) v += t;
            }
            if (g < num_groups) prefix[g + 1] = carry + v;
            carry += __shfl_sync(0xffffffffu, v, 31);
        }
    }
    if (lane == 0) prefix[0] = 0;
}

/// The rows of global row tile t (0 <= t < prefix[G]): binary search for the group holding it.
/// The group whose row tiles hold row tile t: the last g with prefix[g] <= t (a group with no
/// tiles shares its prefix with the next one, which is found instead).
__device__ __forceinline__ uint32_t group_of_tile(uint32_t t, const uint32_t* prefix, uint32_t num_groups) {
    uint32_t lo = 0, hi = num_groups;              // prefix[lo] <= t < prefix[hi]
    while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        if (prefix[mid] <= t) lo = mid; else hi = mid;
    }
    return lo;
}

__device__ __forceinline__ TileRows locate_group_tile(uint32_t t, const int32_t* groups, const uint32_t* prefix,
                                                      uint32_t num_groups, uint32_t group_rows, uint32_t total_rows,
                                                      uint32_t block_m) {
    const uint32_t lo = group_of_tile(t, prefix, num_groups);
    uint32_t first, rows;
    group_extent(groups, lo, group_rows, total_rows, first, rows);
    return TileRows{first + (t - prefix[lo]) * block_m, first + rows, lo};
}

/// The token tiles of a kernel whose tiles are BLOCK_M rows of A and C (the wg3 and tall kernels),
/// plain or grouped: the scheduler over them (grouped: as many row tiles as the prefix holds) and
/// a unit's rows. ``prefix`` is the shared-memory tile prefix (group_tile_prefix), grouped only.
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kGroupM, bool kGrouped>
struct RowTileSpace {
    using Scheduler = TileScheduler<BLOCK_M, BLOCK_N, 128, kGroupM>;
    const int32_t* groups;
    const uint32_t* prefix;
    uint32_t num_groups, group_rows, M, N, K;

    __device__ __forceinline__ Scheduler scheduler() const {
        return Scheduler(kGrouped ? prefix[num_groups] * BLOCK_M : M, N, K, 1);
    }
    /// A unit's first row, where its stores stop (its group's end, or M), and its group.
    __device__ __forceinline__ TileRows rows(const WorkUnit& w) const {
        if constexpr (kGrouped) {
            return locate_group_tile(w.m_block, groups, prefix, num_groups, group_rows, M, BLOCK_M);
        } else {
            return TileRows{w.m_block * BLOCK_M, M, 0u};
        }
    }
};

}  // namespace fp8gemm
