// epilogue.cuh: writing a warpgroup's 64 x BLOCK_N accumulator tile to C.
//
// Two ways, chosen at compile time by the kernel:
//   * TMA store (the fast path): the fragments go to a shared-memory staging tile laid out as TMA
//     reads it with CU_TENSOR_MAP_SWIZZLE_128B -- [chunk][64 rows][128 B], where a chunk is 128 B
//     of columns and 16-byte unit u of row r sits at position u ^ (r % 8) -- and one thread then
//     issues one bulk tensor store per chunk. The store runs asynchronously (the warpgroup goes on
//     to its next tile); out-of-bounds rows and columns of the box are not written. Needs the row
//     pitch of C and its base a multiple of 16 bytes, and BLOCK_N * sizeof(out) a multiple of 128.
//     Tiles of 8-32 columns whose rows are 16-64 bytes store one unswizzled box instead
//     (NarrowStaging; CU_TENSOR_MAP_SWIZZLE_NONE).
//   * direct stores from registers, masked, for everything else.
// NOTES: the swizzle makes the 8 rows one warp writes per store land in 8 different 16-byte bank
// groups, so the staging writes are free of bank conflicts.
#pragma once
#include "common/types.cuh"
#include "ptx/sync.cuh"
#include "ptx/tma.cuh"

namespace fp8gemm {

/// Stage one warpgroup's accumulator fragments through Staging::write_pair (layout of
/// ptx/wgmma_fp8.cuh: warp w, lane l holds rows 16w + l/4 (+8), columns 8j + 2(l%4) (+1)).
/// Then, before the bulk store: fence_proxy_async_shared() and a warpgroup barrier.
template <class Staging, uint32_t BLOCK_N, int kNumAccum>
__device__ __forceinline__ void stage_fragments(uint8_t* stage, uint32_t warp_in_wg, uint32_t lane,
                                                const float (&total)[kNumAccum]) {
    static_assert(kNumAccum == static_cast<int>(BLOCK_N / 2), "a 64 x BLOCK_N fragment set");
    const uint32_t r = warp_in_wg * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < static_cast<int>(BLOCK_N / 8); ++j) {
        const uint32_t c = 8 * j + 2 * (lane % 4);
        Staging::write_pair(stage, r, c, total[4 * j], total[4 * j + 1]);
        Staging::write_pair(stage, r + 8, c, total[4 * j + 2], total[4 * j + 3]);
    }
}

/// The TMA-store epilogue of one warpgroup (all its threads), for either staging: wait until the
/// bulk store of its previous tile has read ``stage``, stage the fragments, make them visible to
/// the async proxy, then its first thread stores the tile whose top-left element is C[row, col].
/// ``barrier``: a named barrier of this warpgroup's own.
template <class Staging, int kNumAccum>
__device__ __forceinline__ void staged_store_tile(const TmaDescriptor* tmap_c, uint8_t* stage, uint32_t barrier,
                                                  uint32_t warp_in_wg, uint32_t lane, const float (&total)[kNumAccum],
                                                  uint32_t col, uint32_t row) {
    const bool leader = threadIdx.x % kWarpgroupThreads == 0;
    if (leader) tma_store_wait_read<0>();
    named_barrier_sync(barrier, kWarpgroupThreads);
    stage_fragments<Staging, Staging::kBlockN>(stage, warp_in_wg, lane, total);
    fence_proxy_async_shared();                 // generic-proxy writes -> TMA reads
    named_barrier_sync(barrier, kWarpgroupThreads);
    if (leader) Staging::store(tmap_c, stage, col, row);
}

///
/// kSwz: the chunk's row bytes and the map's swizzle, 128 (CU_TENSOR_MAP_SWIZZLE_128B) or 64
/// (CU_TENSOR_MAP_SWIZZLE_64B: rows of BLOCK_N * sizeof(out) a multiple of 64 but not of 128,
/// e.g. 96 bf16 columns = 3 chunks of 32, DeepGEMM's kSwizzleDMode = 64). The swizzle XORs the
/// 16-byte unit index (bits 4..) with address bits 7..: unit u of row r sits at u ^ (r * kSwz /
/// 128) % (kSwz / 16); a warp's 8 rows of one store still fall on 32 distinct banks.
template <OutType kOut, uint32_t BLOCK_N, uint32_t kSwz = kSwizzleBytes>
struct SwizzledStaging {
    static_assert(kSwz == 128 || kSwz == 64, "128B or 64B swizzled chunks");
    static constexpr uint32_t kBlockN = BLOCK_N;
    static constexpr uint32_t kElemBytes = kOut == OutType::kFP32 ? 4 : 2;
    static constexpr uint32_t kRows = kWgmmaM;                          // one warpgroup's rows
    static constexpr uint32_t kChunkElems = kSwz / kElemBytes;          // columns per chunk
    static constexpr uint32_t kNumChunks = BLOCK_N * kElemBytes / kSwz;
    static constexpr uint32_t kChunkBytes = kRows * kSwz;               // 8 KiB (4 KiB at 64B)
    static constexpr uint32_t kBytes = kNumChunks * kChunkBytes;        // per warpgroup
    static constexpr bool kSupported = (BLOCK_N * kElemBytes) % kSwz == 0;

    /// Stage the pair (row, col), (row, col + 1); col even, both inside the tile.
    __device__ __forceinline__ static void write_pair(uint8_t* stage, uint32_t row, uint32_t col, float v0,
                                                      float v1) {
        const uint32_t byte = col * kElemBytes;
        const uint32_t in_chunk = byte % kSwz;
        uint8_t* dst = stage + (byte / kSwz) * kChunkBytes + row * kSwz +
                       ((((in_chunk / 16) ^ ((row * kSwz / 128) % (kSwz / 16))) * 16) | (in_chunk % 16));
        store_out2<kOut>(dst, 0, v0, v1);
    }

    /// Stage one warpgroup's accumulator fragments (stage_fragments).
    template <int kNumAccum>
    __device__ __forceinline__ static void write_fragments(uint8_t* stage, uint32_t warp_in_wg, uint32_t lane,
                                                           const float (&total)[kNumAccum]) {
        stage_fragments<SwizzledStaging, BLOCK_N>(stage, warp_in_wg, lane, total);
    }

    /// One thread: a bulk tensor store per 128-byte chunk of the staged 64 x BLOCK_N tile, whose
    /// top-left element is C[row, col], committed as one bulk group.
    __device__ __forceinline__ static void store(const TmaDescriptor* tmap_c, const uint8_t* stage, uint32_t col,
                                                 uint32_t row) {
#pragma unroll
        for (uint32_t c = 0; c < kNumChunks; ++c)
            tma_store_2d(tmap_c, stage + c * kChunkBytes, col + c * kChunkElems, row);
        tma_store_commit_group();
    }

    /// The whole TMA-store epilogue of one warpgroup (staged_store_tile).
    template <int kNumAccum>
    __device__ __forceinline__ static void store_tile(const TmaDescriptor* tmap_c, uint8_t* stage, uint32_t barrier,
                                                      uint32_t warp_in_wg, uint32_t lane,
                                                      const float (&total)[kNumAccum], uint32_t col, uint32_t row) {
        staged_store_tile<SwizzledStaging>(tmap_c, stage, barrier, warp_in_wg, lane, total, col, row);
    }
};

/// The TMA-store staging of a tile whose rows are 16, 32 or 64 bytes (8-32 columns): one box of
/// 64 rows x BLOCK_N columns laid out row-major without swizzle (the map's CU_TENSOR_MAP_SWIZZLE_NONE,
/// box {BLOCK_N, 64}), one bulk tensor store per warpgroup tile, through staged_store_tile. NOTES: against the masked direct stores such a tile's epilogue
/// left the kernel 0.3-0.5 us longer at K = 1024 (H200, stores ablated, bench/NOTES.md): a warp's
/// direct stores write 8 rows of 16 bytes each, half-sector writes the grid's end waits for. The
/// staging writes of one warp store fall on 8 rows kRowBytes apart: 2-4 way bank conflicts on a
/// few stores per tile, left as they are.
template <OutType kOut, uint32_t BLOCK_N>
struct NarrowStaging {
    static constexpr uint32_t kBlockN = BLOCK_N;
    static constexpr uint32_t kElemBytes = kOut == OutType::kFP32 ? 4 : 2;
    static constexpr uint32_t kRows = kWgmmaM;
    static constexpr uint32_t kRowBytes = BLOCK_N * kElemBytes;
    static constexpr uint32_t kBytes = kRows * kRowBytes;               // per warpgroup: 1-4 KiB
    static constexpr bool kSupported = kRowBytes == 16 || kRowBytes == 32 || kRowBytes == 64;
    // As SwizzledStaging's, for a kernel that issues the stores itself (the dense kernel): one
    // chunk, the whole row.
    static constexpr uint32_t kNumChunks = 1;
    static constexpr uint32_t kChunkBytes = kBytes;
    static constexpr uint32_t kChunkElems = BLOCK_N;

    /// Stage the pair (row, col), (row, col + 1); col even, both inside the tile.
    __device__ __forceinline__ static void write_pair(uint8_t* stage, uint32_t row, uint32_t col, float v0,
                                                      float v1) {
        store_out2<kOut>(stage + row * kRowBytes + col * kElemBytes, 0, v0, v1);
    }

    /// Stage one warpgroup's accumulator fragments (stage_fragments).
    template <int kNumAccum>
    __device__ __forceinline__ static void write_fragments(uint8_t* stage, uint32_t warp_in_wg, uint32_t lane,
                                                           const float (&total)[kNumAccum]) {
        stage_fragments<NarrowStaging, BLOCK_N>(stage, warp_in_wg, lane, total);
    }

    /// One thread: the staged 64 x BLOCK_N tile as one bulk tensor store, committed as a group.
    __device__ __forceinline__ static void store(const TmaDescriptor* tmap_c, const uint8_t* stage, uint32_t col,
                                                 uint32_t row) {
        tma_store_2d(tmap_c, stage, col, row);
        tma_store_commit_group();
    }
};

/// The TMA-store staging a tile of BLOCK_N columns takes: 128-byte swizzled chunks where its rows
/// are whole chunks, else one unswizzled box where they are 16-64 bytes (host: launcher.py
/// tma_store_ok's ``narrow`` and the C map's box).
template <bool kFirst, typename A, typename B>
struct SelectType { using type = A; };
template <typename A, typename B>
struct SelectType<false, A, B> { using type = B; };

template <OutType kOut, uint32_t BLOCK_N>
using StoreStaging = typename SelectType<SwizzledStaging<kOut, BLOCK_N>::kSupported, SwizzledStaging<kOut, BLOCK_N>,
                                         NarrowStaging<kOut, BLOCK_N>>::type;

/// Masked direct stores of one thread's fragments (rows row0 and row0 + 8, see wgmma_fp8.cuh).
template <OutType kOut, uint32_t BLOCK_N, int kNumAccum>
__device__ __forceinline__ void store_fragments_direct(const float (&total)[kNumAccum], void* out, int64_t ldc,
                                                       uint32_t M, uint32_t N, uint32_t row0, uint32_t col_base) {
    const bool pair_ok = (ldc % 2 == 0) &&
                         (reinterpret_cast<uint64_t>(out) % (2 * (kOut == OutType::kFP32 ? 4 : 2)) == 0);
#pragma unroll
    for (int j = 0; j < static_cast<int>(BLOCK_N / 8); ++j) {
        const uint32_t col = col_base + 8 * j;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const uint32_t row = row0 + 8 * h;
            if (row >= M || col >= N) continue;
            const float v0 = total[4 * j + 2 * h];
            const float v1 = total[4 * j + 2 * h + 1];
            const int64_t offset = static_cast<int64_t>(row) * ldc + col;
            if (col + 1 < N && pair_ok) {
                store_out2<kOut>(out, offset, v0, v1);
            } else {
                store_out<kOut>(out, offset, v0);
                if (col + 1 < N) store_out<kOut>(out, offset + 1, v1);
            }
        }
    }
}

/// Swap-AB: the tile holds C^T (rows = weight rows n, columns = tokens m); store C[m, n] masked.
template <OutType kOut, uint32_t BLOCK_N, int kNumAccum>
__device__ __forceinline__ void store_fragments_transposed(const float (&total)[kNumAccum], void* out, int64_t ldc,
                                                           uint32_t M, uint32_t N, uint32_t row0, uint32_t col0) {
#pragma unroll
    for (int j = 0; j < static_cast<int>(BLOCK_N / 8); ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const uint32_t n = row0 + 8 * h;
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const uint32_t m = col0 + 8 * j + e;
                if (n < N && m < M) store_out<kOut>(out, static_cast<int64_t>(m) * ldc + n, total[4 * j + 2 * h + e]);
            }
        }
    }
}

}  // namespace fp8gemm
