// sm90_fp8_gemm_swap_ab.cu: the decode-size W8A8 block-FP8 GEMM for SM90 (M <= 64 tokens).
//
// Same operands, layouts and result as sm90_fp8_gemm_general.cu (read its header first), computed
// as C^T = B A^T: the weight rows lie on wgmma's 64-row M side and the tokens on its N side
// (BLOCK_N = 8..64), so no MMA row is wasted on padding tokens. The pipeline is the general
// kernel's (general_tiles.cuh: one TMA producer warpgroup, two consumer warpgroups of 64 weight
// rows, a persistent grid over (tile, K split) units) with tmap_a mapping B and tmap_b mapping A.
// Bs becomes one scalar per tile (a 128-row tile is one Bs block) and As a scale per column; the
// epilogue stores the tile transposed, masked, from registers.
// kConsumers = 1: 64-row weight tiles, one consumer warpgroup (general::Cta<1>, as the general
// kernel's 64-row tiles), twice the tiles over N without a K split; a tile is then half of a Bs
// block. NOTES: each warpgroup runs the same m64 wgmma chain and promotion on its 64 rows as in a
// 128-row tile, which is why the batch-invariant mode may take it (dispatch/invariant.py: SWAP64).
// Split-K (num_splits > 1, the usual case here: few tiles, long K): split_k.cuh.
// Grouped (kGrouped, MoE decode): each group's tokens on the BLOCK_N side; B is [G * N, K].
// kRawSplit (the batch-invariant mode's split, forced only until its GPU tests run): a split keeps
// each K block's raw wgmma accumulator (before any scale) in a workspace slot of its own, and the
// tile's last split runs the one promotion chain over every block in order from +0, the same
// FMUL / FFMA as the unsplit loop: a row's bits are then the unsplit kernel's whatever the split
// count (the bits are fixed by the per-block wgmma results and that chain, not by which CTA
// computed a block). Explicit splits only (no tail split), not grouped.
// kRawCluster (the batch-invariant mode's split under FP8GEMM_BATCH_INVARIANT_RAW_CLUSTER=1): the
// raw split's bits without its workspace. The S = num_splits splits of a tile run as one
// thread-block cluster of S CTAs (the host launches clusters of S along x, one unit per CTA:
// grid = tiles x S, so CTA rank r of a cluster is split r of its tile). Each CTA keeps its K
// range's raw accumulators in its own shared memory after the ring (a slot per K block and
// promotion group, [slot][j][consumer thread] float4: BLOCK_M x BLOCK_N x 4 bytes each; the host
// sizes the launch's shared memory for ceil(nkb / S) blocks and refuses what does not fit); after
// a cluster barrier each CTA promotes its 1/S of the tile's float4s over every K block in order
// from +0, reading each block's slot from the CTA that computed it (ld.shared::cluster), with the
// raw split's expression (the same FMUL for the column scale, one FFMA per block and group), and
// stores them; a second cluster barrier keeps every CTA's shared memory until its peers are done.
// NOTES: a cluster is co-scheduled, so no split waits on one that has not started, and the
// exchange never leaves the GPC (the raw split's last CTA read every slot back through L2 alone:
// nkb slots per tile in dependent round trips, issue 57's study).
#include "common/types.cuh"
#include "common/pipeline.cuh"
#include "ptx/cluster.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/prefetch.cuh"
#include "ptx/sync.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"
#include "epilogue.cuh"
#include "general_tiles.cuh"
#include "scheduler.cuh"
#include "split_k.cuh"

namespace fp8gemm {

// The argument list is the general kernel's (the host builds one argument block for both); the
// C tensor map and the fused SwiGLU's arguments are unused here.
template <uint32_t BLOCK_N, uint32_t kNumStages, int kOutType, uint32_t kGroupM, bool kFinePromotion,
          bool kGrouped = false, bool kRawSplit = false, uint32_t kConsumers = 2, bool kRawCluster = false>
__global__ void __launch_bounds__(general::Cta<kConsumers>::kThreads, 1)
sm90_fp8_gemm_swap_ab_kernel(const __grid_constant__ TmaDescriptor tmap_a,   // B [N, K], box {128, BLOCK_M}
                             const __grid_constant__ TmaDescriptor tmap_b,   // A [M, K], box {128, BLOCK_N}
                             const __grid_constant__ TmaDescriptor tmap_c,   // unused
                             const float* __restrict__ a_scale, int64_t sa_stride_m, int64_t sa_stride_k,
                             const float* __restrict__ b_scale, int64_t sb_stride_n, int64_t sb_stride_k,
                             void* __restrict__ out, int64_t ldc,
                             uint32_t M, uint32_t N, uint32_t K,
                             uint32_t num_splits,                      // K splits per tile (1: none; kTailSplit: the last wave's, scheduler.cuh)
                             float* __restrict__ workspace,            // [tiles][splits][BLOCK_M*BLOCK_N] if split
                             uint32_t* __restrict__ tile_counters,     // [tiles], zero between launches
                             const int32_t* __restrict__ groups, uint32_t num_groups, uint32_t group_rows,
                             int64_t sb_stride_g,
                             float* __restrict__ act_scale, float swiglu_limit) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace general;
    using CtaShape = Cta<kConsumers>;
    constexpr uint32_t BLOCK_M = CtaShape::BLOCK_M;            // weight rows: 128, or 64 with one consumer
    constexpr uint32_t kNumConsumerThreads = CtaShape::kConsumerThreads;
    constexpr OutType kOut = static_cast<OutType>(kOutType);
    using Mma = WgmmaFp8<BLOCK_N>;
    static_assert(BLOCK_N % 8 == 0 && BLOCK_N >= 8 && BLOCK_N <= 128, "wgmma N: 8..256 step 8; <=128 here");
    static_assert(kNumStages >= 2, "need at least double buffering");
    static_assert(!(kRawSplit && kGrouped), "the raw split is the plain GEMM's");
    static_assert(!(kRawCluster && (kRawSplit || kGrouped)), "the cluster raw split: the plain GEMM's, alone");
    constexpr bool kRaw = kRawSplit || kRawCluster;            // raw slots in the K loop, promoted after it
    static_assert(kConsumers == 2 || !kGrouped, "64-row tiles: the plain GEMM only");
    static_assert(kScaleBlock % BLOCK_M == 0, "a tile must lie inside one 128-row block of Bs");

    using SmemLayout = Smem<BLOCK_N, kNumStages, 0, 0, kConsumers>;
    constexpr uint32_t SMEM_B_PER_STAGE = BLOCK_N * BLOCK_K;
    extern __shared__ uint8_t smem_raw[];
    const SmemLayout smem(smem_raw);
    uint32_t* tile_prefix = smem.tail;                         // kGrouped: [G + 1]
    // kRawCluster: this CTA's raw slots [kb - kb_begin][group][j][consumer thread] (16-byte aligned)
    float4* raw_slots = reinterpret_cast<float4*>(smem.tail);

    // kRawCluster: the launch must be clusters of S = num_splits CTAs along x, one unit per CTA
    // (dispatch/general.py: SwapAB.plan), so that cluster rank r runs split r of its tile; a plain
    // launch would read peers that do not exist: refused outright. NOTES: here, before the roles
    // split: the same trap after the K loop made ptxas spill 52-192 bytes in the consumers.
    if constexpr (kRawCluster) {
        if (cluster_nctarank() != num_splits || gridDim.x % num_splits != 0) asm volatile("trap;");
    }

    const uint32_t warp_idx = warp_idx_uniform();
    const uint32_t lane_idx = threadIdx.x % 32;
    const uint32_t warpgroup_idx = warp_idx / 4;

    using Tiles = GeneralTiles<BLOCK_N, kGroupM, true, kGrouped, false,
                               general_max_box_shift<kNumStages, SMEM_B_PER_STAGE, 0>(), BLOCK_M>;
    const Tiles tiles{M, N, K, num_splits, groups, tile_prefix, num_groups, group_rows};

    typename Tiles::Scheduler producer_sched;
    UnitLoads producer_first;
    // NOTES: not under split-K, see the general kernel.
    const bool early_start = !kGrouped && num_splits == 1;
    general_cta_start<kNumStages, false, kGrouped>(tiles, smem, tile_prefix, &tmap_a, &tmap_b, &tmap_c, warp_idx,
                                                    early_start, producer_sched, producer_first);
    if (warpgroup_idx == 0) {
        general_producer<kNumStages, 1, false, kGrouped>(tiles, smem, &tmap_a, &tmap_b, early_start, producer_sched,
                                                         producer_first);
        if constexpr (kRawCluster) {
            // NOTES: every thread of the cluster takes part in both of the consumers' cluster
            // barriers (the slots published, the peers done reading), the producer's too; it
            // publishes nothing, so its arrivals are relaxed.
            barrier_cluster_arrive_relaxed();
            barrier_cluster_wait_acquire();
            barrier_cluster_arrive_relaxed();
            barrier_cluster_wait_acquire();
        }
    } else {
        // ================================ consumers ===============================
        setmaxnreg_inc<kConsumerRegs>();
        const auto sched = tiles.scheduler();
        const uint32_t math_wg = warpgroup_idx - 1;      // which 64 weight rows of the tile
        const uint32_t warp_in_wg = warp_idx % 4;
        const uint32_t consumer_tid = threadIdx.x - kWarpgroupThreads;   // 0..kNumConsumerThreads-1
        // Accumulator rows of this thread inside the tile: r and r + 8 (see ptx/wgmma_fp8.cuh).
        const uint32_t row_in_tile = math_wg * kWgmmaM + warp_in_wg * 16 + lane_idx / 4;

        float accum[Mma::kNumAccum];   // one promotion group of this warpgroup's 64 x BLOCK_N
        float total[Mma::kNumAccum];   // running FP32 sum after scale promotion
        PipelineState<kNumStages> pipe;

        for (uint32_t u = blockIdx.x; u < sched.num_units; u += gridDim.x) {
            const WorkUnit w = sched.unit(u);
            const TileSpan t = tiles.span(w);
            uint32_t a_row, a_shift;
            tiles.a_box(t, a_row, a_shift);
            // The tokens (columns) this tile may store: M, or (grouped) the end of its group.
            const uint32_t col_limit = t.col_end;
            const uint32_t row0 = t.row_base + row_in_tile;
            // One Bs per tile (128 weight rows are one Bs block, 64 half of one), As per tile
            // column; column reads clamp to a valid token (tokens past the limit are never stored).
            const float* sb_row = b_scale + static_cast<int64_t>(w.m_block / (kScaleBlock / BLOCK_M)) * sb_stride_n +
                                  (kGrouped ? static_cast<int64_t>(t.group) * sb_stride_g : 0);
            const uint32_t col0 = t.col_base + 2 * (lane_idx % 4);   // this thread's first column
            // NOTES: an M-major As puts each K block's tile columns in their own line, so every
            // block's loads below would wait on DRAM (L2 cold: 12.1 against 9.2 us K-major at
            // 16 x 4096 x 4096); one warp per consumer warpgroup asks L2 for the unit's lines
            // first, a lane per K block. A K-major As brings 32 blocks per line: nothing to do.
            if (sa_stride_m == 1 && warp_in_wg == 0) {
                const uint32_t last = min(t.col_base + BLOCK_N, col_limit) - 1;
                for (uint32_t kb = w.kb_begin + lane_idx; kb < w.kb_end; kb += 32) {
                    const float* col = a_scale + static_cast<int64_t>(kb) * sa_stride_k;
#pragma unroll
                    for (uint32_t j = 0; j < BLOCK_N; j += 32) prefetch_l2(col + min(t.col_base + j, last));
                    prefetch_l2(col + last);
                }
            }
#pragma unroll
            for (int i = 0; i < Mma::kNumAccum; ++i) total[i] = 0.0f;
            // As[token, kb] * Bs[weight block, kb] for tile column col (sb: the Bs): one expression
            // for the K loop and both raw splits' ordered promotions, so all round the same product.
            auto scale_product = [&](uint32_t col, uint32_t kb, float sb) {
                const uint32_t token = min(col, col_limit - 1);
                return a_scale[static_cast<int64_t>(token) * sa_stride_m + kb * sa_stride_k] * sb;
            };
            // Per column of this thread ([j][e]).
            auto column_scales = [&](uint32_t kb, float (&s_col)[BLOCK_N / 4]) {
                const float sb = sb_row[kb * sb_stride_k];
#pragma unroll
                for (uint32_t q = 0; q < BLOCK_N / 4; ++q)
                    s_col[q] = scale_product(col0 + 8 * (q / 2) + (q % 2), kb, sb);
            };
            // kRawSplit: the tile's raw slots, one per (K block, promotion group), after its
            // earlier tiles' (explicit splits: every tile is split, tile_idx counts them all).
            constexpr uint32_t kGroupsPerBlock = kFinePromotion ? BLOCK_K / kWgmmaKFp8 : 1;
            const uint32_t num_k_blocks = (K + BLOCK_K - 1) / BLOCK_K;
            const uint32_t raw_base = w.tile_idx * num_k_blocks * kGroupsPerBlock;
            // A thread whose values all lie past N or whose first column is past the tokens holds
            // nothing that is ever stored.
            const bool raw_rows = kRaw && row0 < N && col0 < col_limit;

            for (uint32_t kb = w.kb_begin; kb < w.kb_end; ++kb, ++pipe) {
                // Scale loads first: their latency hides under the wait and the wgmma.
                float s_col[BLOCK_N / 4];
                if constexpr (!kRaw) column_scales(kb, s_col);

                mbarrier_wait_parity(&smem.full_bar[pipe.stage], pipe.full_parity());
                const uint8_t* a_tile = smem.a + pipe.stage * (BLOCK_M * BLOCK_K) + (math_wg * kWgmmaM + a_shift) * BLOCK_K;
                const uint8_t* b_tile = smem.b + pipe.stage * SMEM_B_PER_STAGE;
                const uint64_t desc_a = make_smem_desc_k128b(a_tile);
                const uint64_t desc_b = make_smem_desc_k128b(b_tile);

                // Promotion groups: 4 wgmma per group (coarse) or 1 (fine); scales are per 128-K block.
                constexpr uint32_t kMmasPerBlock = BLOCK_K / kWgmmaKFp8;
                constexpr uint32_t kMmasPerGroup = kFinePromotion ? 1 : kMmasPerBlock;
#pragma unroll
                for (uint32_t k0 = 0; k0 < kMmasPerBlock; k0 += kMmasPerGroup) {
                    wgmma_fence_operands(accum);
                    wgmma_fence();
#pragma unroll
                    for (uint32_t k = k0; k < k0 + kMmasPerGroup; ++k) {
                        // NOTES: +k*32 bytes along the swizzled row = +(k*32 >> 4) in the address field.
                        const uint64_t step = (k * kWgmmaKFp8) >> 4;
                        Mma::mma(desc_a + step, desc_b + step, accum, k > k0 ? 1u : 0u);
                    }
                    wgmma_commit_group();
                    wgmma_wait<0>();
                    wgmma_fence_operands(accum);

                    // After the block's last wgmma the stage is no longer read: hand it back.
                    if (k0 + kMmasPerGroup == kMmasPerBlock) {
                        __syncwarp();
                        if (lane_idx == 0) mbarrier_arrive(&smem.empty_bar[pipe.stage]);
                    }

                    if constexpr (kRawCluster) {
                        // Into this CTA's own slot of the block (coalesced float4: no bank conflict).
                        constexpr uint32_t kSlotF4 = BLOCK_M * BLOCK_N / 4;
                        float4* slot = raw_slots + ((kb - w.kb_begin) * kGroupsPerBlock + k0 / kMmasPerGroup) * kSlotF4;
                        if (raw_rows) {
#pragma unroll
                            for (int j = 0; j < Mma::kNumAccum / 4; ++j)
                                slot[j * kNumConsumerThreads + consumer_tid] =
                                    make_float4(accum[4 * j], accum[4 * j + 1], accum[4 * j + 2], accum[4 * j + 3]);
                        }
                    } else if constexpr (kRawSplit) {
                        split_k_store_partial<BLOCK_M * BLOCK_N, kNumConsumerThreads>(
                            accum, workspace, raw_base, kb * kGroupsPerBlock + k0 / kMmasPerGroup, raw_rows, consumer_tid);
                    } else {
                        // Promotion: total += accum * As[token, kb] * Bs[weight block, kb]. Accumulator i
                        // is (row half h = (i >> 1) & 1, column pair j = i / 4, element e = i % 2).
#pragma unroll
                        for (int i = 0; i < Mma::kNumAccum; ++i) total[i] += accum[i] * s_col[(i / 4) * 2 + (i % 2)];
                    }
                }
            }

            if constexpr (kRawCluster) {
                // ---- cluster raw split: every split's slots published, each CTA promotes 1/S ----
                barrier_cluster_arrive_release();
                barrier_cluster_wait_acquire();
                // A slot's kSlotF4 float4 are numbered f = j * kNumConsumerThreads + owner thread
                // (the owner's accumulators 4j .. 4j + 3: rows r, r + 8 x columns c, c + 1). CTA
                // split_idx promotes f in [split_idx * per, + per), its thread q those at
                // q + c * kNumConsumerThreads; at S >= 2 (the host's) that is at most kPromoF4 each.
                constexpr uint32_t kSlotF4 = BLOCK_M * BLOCK_N / 4;
                constexpr uint32_t kPromoF4 = (Mma::kNumAccum / 4 + 1) / 2;
                const uint32_t per = (kSlotF4 + w.num_splits - 1) / w.num_splits;
                uint32_t f_bytes[kPromoF4];                  // the float4's offset inside a slot
                uint32_t n_row[kPromoF4], m_col[kPromoF4];   // its first weight row and token
                bool live[kPromoF4];                         // promoted and (partly) stored
#pragma unroll
                for (uint32_t c = 0; c < kPromoF4; ++c) {
                    const uint32_t q = c * kNumConsumerThreads + consumer_tid;
                    const uint32_t f = w.split_idx * per + q;
                    const uint32_t owner = f % kNumConsumerThreads, lane = owner % 32;
                    n_row[c] = t.row_base + owner / 32 * 16 + lane / 4;           // as row0 of the owner
                    m_col[c] = t.col_base + 2 * (lane % 4) + 8 * (f / kNumConsumerThreads);
                    // the owner stored it (raw_rows) and something of it is stored
                    live[c] = q < per && f < kSlotF4 && n_row[c] < N && m_col[c] < col_limit;
                    f_bytes[c] = min(f, kSlotF4 - 1) * 16;   // in bounds whatever it holds
                }
                float acc[kPromoF4][4];
#pragma unroll
                for (uint32_t c = 0; c < kPromoF4; ++c)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[c][e] = 0.0f;
                // kRawDepth K blocks' slots and scales loaded before the first is summed (as the
                // raw split's loop: one round trip per kRawDepth blocks); block kb lives in the
                // CTA of split kb / kb_per_split, at its local slot. Indices past the last block
                // are clamped (every load in bounds) and their sums discarded by a select.
                constexpr uint32_t kRawLoads = kGroupsPerBlock * kPromoF4;
                constexpr uint32_t kRawDepth = kRawLoads >= 16 ? 1 : 16 / kRawLoads;
                constexpr uint32_t kSlotBytes = kSlotF4 * 16;
                const uint32_t kb_per = sched.kb_per_split;
                const uint32_t slots_addr = smem_addr(raw_slots);
                bool any_live = false;                       // M = 1: 3 of 4 lanes hold nothing stored
#pragma unroll
                for (uint32_t c = 0; c < kPromoF4; ++c) any_live |= live[c];
                for (uint32_t kb0 = 0; any_live && kb0 < num_k_blocks; kb0 += kRawDepth) {
                    float4 v[kRawDepth][kGroupsPerBlock][kPromoF4];
                    float sc[kRawDepth][kPromoF4][2];
#pragma unroll
                    for (uint32_t d = 0; d < kRawDepth; ++d) {
                        const uint32_t kb = min(kb0 + d, num_k_blocks - 1);
                        const uint32_t src = div_by_runtime(kb, kb_per);          // its split = cluster rank
                        const uint32_t slot = mapa_shared(slots_addr + (kb - src * kb_per) * kGroupsPerBlock * kSlotBytes,
                                                          src);
                        // the K loop's product for this float4's two tokens
                        const float sb = sb_row[kb * sb_stride_k];
#pragma unroll
                        for (uint32_t c = 0; c < kPromoF4; ++c) {
#pragma unroll
                            for (uint32_t e = 0; e < 2; ++e) sc[d][c][e] = scale_product(m_col[c] + e, kb, sb);
#pragma unroll
                            for (uint32_t g = 0; g < kGroupsPerBlock; ++g)
                                v[d][g][c] = ld_shared_cluster_f32x4(slot + g * kSlotBytes + f_bytes[c]);
                        }
                    }
#pragma unroll
                    for (uint32_t d = 0; d < kRawDepth; ++d) {
                        const bool in_k = kb0 + d < num_k_blocks;
#pragma unroll
                        for (uint32_t g = 0; g < kGroupsPerBlock; ++g) {
#pragma unroll
                            for (uint32_t c = 0; c < kPromoF4; ++c) {
                                const float a[4] = {v[d][g][c].x, v[d][g][c].y, v[d][g][c].z, v[d][g][c].w};
#pragma unroll
                                for (int e = 0; e < 4; ++e) {
                                    // the unsplit loop's FFMA (total += accum * s), element e = 2h + column
                                    // e % 2; a clamped block's result is dropped, so even a -0 sum stays
                                    const float r = __fmaf_rn(a[e], sc[d][c][e % 2], acc[c][e]);
                                    acc[c][e] = in_k ? r : acc[c][e];
                                }
                            }
                        }
                    }
                }
                // The stores: rows r, r + 8 x tokens c, c + 1 of each float4, masked as
                // store_fragments_transposed's (the same conversion).
#pragma unroll
                for (uint32_t c = 0; c < kPromoF4; ++c) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const uint32_t n = n_row[c] + 8 * (e / 2), m = m_col[c] + e % 2;
                        if (live[c] && n < N && m < col_limit)
                            store_out<kOut>(out, static_cast<int64_t>(m) * ldc + n, acc[c][e]);
                    }
                }
                // No CTA leaves (its shared memory with it) while a peer may still read its slots.
                // NOTES: release, not relaxed: a thread whose stores are all masked off need not
                // have waited for its last loads' values before a relaxed arrival.
                barrier_cluster_arrive_release();
                barrier_cluster_wait_acquire();
                continue;
            }
            if constexpr (kRawSplit) {
                // Every split's raw slots are in; the tile's last split promotes them all, block by
                // block in order from +0, as the unsplit loop does.
                if (!split_k_arrive<kNumConsumerThreads>(tile_counters, w.tile_idx, w.num_splits, consumer_tid,
                                                         CtaShape::kConsumerBarrier))
                    continue;                                    // another split finishes the tile
                const float4* raw = reinterpret_cast<const float4*>(workspace) +
                                    static_cast<int64_t>(raw_base) * (BLOCK_M * BLOCK_N / 4) + consumer_tid;
                // kRawDepth K blocks' slots and scales are loaded before the first of them is summed:
                // one dependent L2 round trip per kRawDepth blocks, not per block (with a runtime
                // trip count the compiler kept each block's loads behind the previous block's exit
                // test). Indices past the last block are clamped (loaded, summed as 0 * 0), so every
                // load is in bounds and the sum is the unsplit loop's, in its order.
                constexpr uint32_t kRawFloats = kGroupsPerBlock * Mma::kNumAccum;
                constexpr uint32_t kRawDepth = kRawFloats >= 64 ? 1 : 64 / kRawFloats;
                for (uint32_t kb0 = 0; raw_rows && kb0 < num_k_blocks; kb0 += kRawDepth) {
                    float4 v[kRawDepth][kGroupsPerBlock][Mma::kNumAccum / 4];
                    float s_col[kRawDepth][BLOCK_N / 4];
#pragma unroll
                    for (uint32_t d = 0; d < kRawDepth; ++d) {
                        const uint32_t kb = min(kb0 + d, num_k_blocks - 1);
                        column_scales(kb, s_col[d]);
#pragma unroll
                        for (uint32_t g = 0; g < kGroupsPerBlock; ++g) {
                            const float4* slot = raw + static_cast<int64_t>(kb * kGroupsPerBlock + g) * (BLOCK_M * BLOCK_N / 4);
#pragma unroll
                            for (int j = 0; j < Mma::kNumAccum / 4; ++j) v[d][g][j] = __ldcg(slot + j * kNumConsumerThreads);
                        }
                    }
#pragma unroll
                    for (uint32_t d = 0; d < kRawDepth; ++d) {
                        // A block past the last adds 0 * 0: total + 0 is total bit for bit, as total is
                        // never -0 (it starts at +0, and x + y is -0 only where both are). No branch
                        // here: ptxas sank the loads past one, next to their use.
                        const bool live = kb0 + d < num_k_blocks;
#pragma unroll
                        for (uint32_t g = 0; g < kGroupsPerBlock; ++g) {
#pragma unroll
                            for (int j = 0; j < Mma::kNumAccum / 4; ++j) {
                                const float a[4] = {v[d][g][j].x, v[d][g][j].y, v[d][g][j].z, v[d][g][j].w};
#pragma unroll
                                for (int e = 0; e < 4; ++e) {
                                    const int i = 4 * j + e;
                                    // fmaf: the FFMA the unsplit loop's `total += accum * s` contracts to (with
                                    // the selects in between, the compiler had split it into FMUL + FADD)
                                    total[i] = __fmaf_rn(live ? a[e] : 0.0f, live ? s_col[d][(i / 4) * 2 + (i % 2)] : 0.0f, total[i]);
                                }
                            }
                        }
                    }
                }
                store_fragments_transposed<kOut, BLOCK_N>(total, out, ldc, col_limit, N, row0, col0);
                continue;
            }

            // ---- split-K: publish this split's partial; the last split of the tile reduces ----
            // A thread whose values all lie past N or whose first column is past the tokens holds
            // nothing that is ever stored.
            if (w.num_splits > 1) {
                const bool has_rows = row0 < N && col0 < col_limit;
                if (!split_k_publish<BLOCK_M * BLOCK_N, kNumConsumerThreads>(total, workspace, tile_counters, w.tile_idx,
                                                                             w.ws_slot, w.split_idx, w.num_splits,
                                                                             has_rows, consumer_tid, CtaShape::kConsumerBarrier))
                    continue;                                    // another split finishes the tile
                split_k_sum<BLOCK_M * BLOCK_N, kNumConsumerThreads>(total, workspace, w.ws_slot, w.num_splits, has_rows,
                                                                    consumer_tid);
            }
            store_fragments_transposed<kOut, BLOCK_N>(total, out, ldc, col_limit, N, row0, col0);
        }
    }
#else
    // Built for another architecture: this kernel needs sm_90a (wgmma, setmaxnreg, TMA).
    asm volatile("trap;");
#endif
}

}  // namespace fp8gemm
