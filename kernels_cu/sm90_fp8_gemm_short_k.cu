// sm90_fp8_gemm_short_k.cu: the short-K W8A8 block-FP8 GEMM for SM90 (K <= 256).
//
// Same operands, layouts and result as sm90_fp8_gemm_general.cu (read its header first):
//   C[M, N] = (A * As) @ (B * Bs)^T, A [M, K] and B [N, K] FP8 E4M3 read by TMA, As / Bs fp32 with
//   any strides, C bf16 / fp16 / fp32 with unit stride along N.
// Which shapes: K <= 256 (one or two 128-wide K blocks, kNumKBlocks = ceil(K / 128)), any M and N;
// the dispatcher sends it K = 256 with M above the swap-AB range (dispatch/short_k.py, bench/NOTES.md).
//
// Why a separate kernel: with two K blocks there is no pipeline to amortize. The general kernel's
// persistent loop, producer warpgroup, ring of stages and empty barriers are all fixed cost here.
// This one is a plain grid, one CTA per BLOCK_M x BLOCK_N tile, with no warp specialization:
//   1. thread 0 initializes one mbarrier per K block and issues every TMA load of the tile at once;
//   2. meanwhile every thread loads its scales and folds As * Bs per row and K block;
//   3. each warpgroup (64 rows) issues the wgmma of K block 0 into one accumulator and of block 1
//      into a second, promotes block 0 while block 1 runs, then block 1;
//   4. the epilogue stores through swizzled shared memory + TMA, or directly from registers.
// FP32 output promotes after every wgmma (kFinePromotion, as in the general kernel), the two
// accumulators alternating over 4 * kNumKBlocks groups. The whole sequence is unrolled at compile
// time, so no wgmma group is in flight across a branch or a loop edge.
#include "common/types.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/sync.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"
#include "epilogue.cuh"

namespace fp8gemm {

namespace short_k {
constexpr uint32_t BLOCK_K = 128;                 // one scale group; one 128B swizzle row
constexpr uint32_t kMaxKBlocks = 2;

template <int V>
struct Index {
    static constexpr int value = V;
};

/// f(Index<0>{}), f(Index<1>{}), ..., f(Index<kCount - 1>{}): a loop whose counter is a constant
/// expression in the body, so that each step can pick its accumulator array at compile time.
template <int kBegin, int kCount, typename F>
__device__ __forceinline__ void static_for(F&& f) {
    if constexpr (kBegin < kCount) {
        f(Index<kBegin>{});
        static_for<kBegin + 1, kCount>(f);
    }
}
}  // namespace short_k

template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumKBlocks, int kOutType, bool kFinePromotion,
          bool kTmaStore>
__global__ void __launch_bounds__(BLOCK_M / kWgmmaM * kWarpgroupThreads, 1)
sm90_fp8_gemm_short_k_kernel(const __grid_constant__ TmaDescriptor tmap_a,   // A [M, K], box {128, BLOCK_M}
                             const __grid_constant__ TmaDescriptor tmap_b,   // B [N, K], box {128, BLOCK_N}
                             const __grid_constant__ TmaDescriptor tmap_c,   // C [M, N], box {128 B, 64} (kTmaStore)
                             const float* __restrict__ a_scale, int64_t sa_stride_m, int64_t sa_stride_k,
                             const float* __restrict__ b_scale, int64_t sb_stride_n, int64_t sb_stride_k,
                             void* __restrict__ out, int64_t ldc,
                             uint32_t M, uint32_t N) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace short_k;
    constexpr OutType kOut = static_cast<OutType>(kOutType);
    using Mma = WgmmaFp8<BLOCK_N>;
    constexpr uint32_t kNumWarpgroups = BLOCK_M / kWgmmaM;

    // ---- preconditions ------------------------------------------------------------------
    static_assert(BLOCK_M == 64 || BLOCK_M == 128, "one or two warpgroups of 64 rows");
    static_assert(BLOCK_N % 8 == 0 && BLOCK_N >= 8 && kScaleBlock % BLOCK_N == 0,
                  "wgmma N, and a tile inside one 128-row block of Bs");
    static_assert(kNumKBlocks >= 1 && kNumKBlocks <= kMaxKBlocks, "K <= 256");

    // ---- shared memory: [A per K block | B per K block | C staging | one mbarrier per K block] ----
    using Staging = SwizzledStaging<kOut, BLOCK_N>;
    static_assert(!kTmaStore || Staging::kSupported, "TMA store needs BLOCK_N * sizeof(out) % 128 == 0");
    constexpr uint32_t SMEM_A_PER_BLOCK = BLOCK_M * BLOCK_K;
    constexpr uint32_t SMEM_B_PER_BLOCK = BLOCK_N * BLOCK_K;
    constexpr uint32_t SMEM_TILES = kNumKBlocks * (SMEM_A_PER_BLOCK + SMEM_B_PER_BLOCK);
    constexpr uint32_t SMEM_C = kTmaStore ? kNumWarpgroups * Staging::kBytes : 0;
    static_assert(SMEM_A_PER_BLOCK % 1024 == 0 && SMEM_B_PER_BLOCK % 1024 == 0, "128B swizzle needs 1024 B alignment");
    static_assert(1024 + SMEM_TILES + SMEM_C + kNumKBlocks * sizeof(Mbarrier) <= kMaxSmemPerBlock,
                  "shared memory over the SM90 limit");

    extern __shared__ uint8_t smem_raw[];
    // NOTES: aligned by an offset from smem_raw (not an integer cast), so the compiler keeps
    // knowing it is shared memory and stages the epilogue with STS, not generic stores.
    uint8_t* smem = smem_raw + (1024u - smem_addr(smem_raw) % 1024u) % 1024u;
    uint8_t* smem_a = smem;                                        // [kNumKBlocks][BLOCK_M][128]
    uint8_t* smem_b = smem + kNumKBlocks * SMEM_A_PER_BLOCK;       // [kNumKBlocks][BLOCK_N][128]
    uint8_t* smem_c = smem + SMEM_TILES;                           // [warpgroups][Staging]
    Mbarrier* full_bar = reinterpret_cast<Mbarrier*>(smem + SMEM_TILES + SMEM_C);   // [kNumKBlocks]

    // Tile of this CTA: n-blocks vary fastest, so neighbouring CTAs share their A rows.
    const uint32_t num_n_blocks = (N + BLOCK_N - 1) / BLOCK_N;
    const uint32_t m_block = blockIdx.x / num_n_blocks;
    const uint32_t n_block = blockIdx.x % num_n_blocks;

    // ---- 1. barriers and every load of the tile, issued by one thread ---------------------
    if (threadIdx.x == 0) {
        prefetch_tensormap(&tmap_a);
        prefetch_tensormap(&tmap_b);
#pragma unroll
        for (uint32_t kb = 0; kb < kNumKBlocks; ++kb) mbarrier_init(&full_bar[kb], 1);
        fence_mbarrier_init();
#pragma unroll
        for (uint32_t kb = 0; kb < kNumKBlocks; ++kb) {
            mbarrier_arrive_expect_tx(&full_bar[kb], SMEM_A_PER_BLOCK + SMEM_B_PER_BLOCK);
            tma_load_2d(smem_a + kb * SMEM_A_PER_BLOCK, &tmap_a, &full_bar[kb], kb * BLOCK_K, m_block * BLOCK_M);
            tma_load_2d(smem_b + kb * SMEM_B_PER_BLOCK, &tmap_b, &full_bar[kb], kb * BLOCK_K, n_block * BLOCK_N);
        }
    }

    // ---- 2. scales, while the loads fly: s[kb][h] = As[row h, kb] * Bs[n block, kb] -----------
    const uint32_t warp_idx = warp_idx_uniform();
    const uint32_t lane_idx = threadIdx.x % 32;
    const uint32_t wg = warp_idx / 4;                         // which 64-row half of the tile
    const uint32_t row0 = m_block * BLOCK_M + wg * kWgmmaM + (warp_idx % 4) * 16 + lane_idx / 4;
    const uint32_t col0 = n_block * BLOCK_N + 2 * (lane_idx % 4);
    // Rows past M read a valid token's scale: their A rows are zero and they are never stored.
    const float* sa0 = a_scale + static_cast<int64_t>(min(row0, M - 1)) * sa_stride_m;
    const float* sa1 = a_scale + static_cast<int64_t>(min(row0 + 8, M - 1)) * sa_stride_m;
    const float* sb = b_scale + static_cast<int64_t>(n_block * BLOCK_N / kScaleBlock) * sb_stride_n;
    float scale[kNumKBlocks][2];
#pragma unroll
    for (uint32_t kb = 0; kb < kNumKBlocks; ++kb) {
        const float b = sb[kb * sb_stride_k];
        scale[kb][0] = sa0[kb * sa_stride_k] * b;
        scale[kb][1] = sa1[kb * sa_stride_k] * b;
    }
    __syncthreads();                                           // barrier init visible to all

    // ---- 3. wgmma groups into two accumulators in turn; promote one while the other runs ----
    constexpr uint32_t kMmasPerBlock = BLOCK_K / kWgmmaKFp8;                  // 4
    constexpr uint32_t kMmasPerGroup = kFinePromotion ? 1 : kMmasPerBlock;
    constexpr int kNumGroups = static_cast<int>(kNumKBlocks * kMmasPerBlock / kMmasPerGroup);
    const uint32_t lo_a = smem_desc_k128b_lo(smem_a + wg * kWgmmaM * BLOCK_K);
    const uint32_t lo_b = smem_desc_k128b_lo(smem_b);
    float acc0[Mma::kNumAccum], acc1[Mma::kNumAccum], total[Mma::kNumAccum];

    const auto issue = [&](auto group, float (&acc)[Mma::kNumAccum]) {
        constexpr uint32_t g = decltype(group)::value;
        constexpr uint32_t kb = g * kMmasPerGroup / kMmasPerBlock;
        if constexpr (g * kMmasPerGroup % kMmasPerBlock == 0) mbarrier_wait_parity(&full_bar[kb], 0);
        wgmma_fence_operands(acc);
        wgmma_fence();
#pragma unroll
        for (uint32_t k = 0; k < kMmasPerGroup; ++k) {
            const uint32_t kk = g * kMmasPerGroup + k - kb * kMmasPerBlock;    // wgmma inside the block
            const uint32_t step = (kk * kWgmmaKFp8) >> 4;                      // +32 B along the row
            Mma::mma(smem_desc_from_lo(lo_a + kb * (SMEM_A_PER_BLOCK >> 4) + step),
                     smem_desc_from_lo(lo_b + kb * (SMEM_B_PER_BLOCK >> 4) + step), acc, k > 0 ? 1u : 0u);
        }
        wgmma_commit_group();
    };
    // Accumulator i is (row half h = (i >> 1) & 1, column pair j = i / 4, element e = i % 2).
    const auto promote = [&](auto group, float (&acc)[Mma::kNumAccum]) {
        constexpr uint32_t g = decltype(group)::value;
        constexpr uint32_t kb = g * kMmasPerGroup / kMmasPerBlock;
        wgmma_fence_operands(acc);
#pragma unroll
        for (int i = 0; i < Mma::kNumAccum; ++i) {
            const float s = scale[kb][(i >> 1) & 1];
            // The first group adds to zero as the general kernel's does (its total starts at 0.0f):
            // fma(acc, s, +0) is acc * s but for a product of -0, which it makes +0; as a bare
            // product this kernel gave such an element -0 where every other kernel gives +0, a
            // different bf16 bit (the batch-invariant mode's rule: dispatch/invariant.py).
            total[i] = g == 0 ? fmaf(acc[i], s, 0.0f) : total[i] + acc[i] * s;
        }
        // NOTES: pins the sum here, before the next wgmma_wait; without it ptxas sank block 0's
        // promotion below the last wait (computing acc0 * s0 + acc1 * s1 as one FFMA), so nothing
        // overlapped the second block's wgmma.
        wgmma_fence_operands(total);
    };
    issue(Index<0>{}, acc0);
    static_for<0, kNumGroups>([&](auto group) {
        constexpr int g = decltype(group)::value;
        if constexpr (g + 1 < kNumGroups) {
            if constexpr ((g + 1) % 2 == 0) issue(Index<g + 1>{}, acc0);
            else issue(Index<g + 1>{}, acc1);
            wgmma_wait<1>();                                   // group g done, g + 1 in flight
        } else {
            wgmma_wait<0>();
        }
        if constexpr (g % 2 == 0) promote(group, acc0);
        else promote(group, acc1);
    });

    // ---- 4. epilogue ---------------------------------------------------------------------
    const uint32_t wg_row_base = m_block * BLOCK_M + wg * kWgmmaM;
    if constexpr (kTmaStore) {
        if (wg_row_base < M) {                                 // a warpgroup wholly past M has nothing
            uint8_t* stage = smem_c + wg * Staging::kBytes;
            Staging::write_fragments(stage, warp_idx % 4, lane_idx, total);
            fence_proxy_async_shared();                        // generic-proxy writes -> TMA reads
            named_barrier_sync(1 + wg, kWarpgroupThreads);
            if (threadIdx.x % kWarpgroupThreads == 0) {
                Staging::store(&tmap_c, stage, n_block * BLOCK_N, wg_row_base);
                tma_store_wait_read<0>();                      // before shared memory goes away
            }
        }
    } else {
        store_fragments_direct<kOut, BLOCK_N>(total, out, ldc, M, N, row0, col0);
    }
#else
    // Built for another architecture: this kernel needs sm_90a (wgmma, TMA).
    asm volatile("trap;");
#endif
}

}  // namespace fp8gemm
