// sm90_fp8_gemm_tall.cu: 256 x BLOCK_N tiles as two 128-row waves of the general kernel's two
// consumer warpgroups, both waves over the same B stage.
//
// Same operands, layouts and result as sm90_fp8_gemm_general.cu (read its header first); plain
// orientation, no K split, coarse promotion (per 128-wide K block): bf16 / fp16 out in the plain
// mode, and a grouped mode (MoE prefill) that also writes fp32 when the caller allows coarse
// promotion (fp8gemm.moe does).
// Why: each B stage feeds 256 token rows instead of 128 (192 in wg3), so a grouped GEMM whose
// experts hold 129-256 rows reads each weight tile once by construction, where two 128-row tiles
// of one expert share it only while they run in step (bench/NOTES.md: V4-Flash L2 at 8192 tokens
// read its weights 1.87x), and L2 -> SM traffic per FLOP drops to 3/4 of 128 x 128 tiles'.
// Per K block each consumer warpgroup runs, for each live wave (its 64 rows 64w.. and 128 + 64w..),
// 4 wgmma m64nBLOCK_Nk32 into one accumulator, waits and promotes into that wave's sum; the
// stage is released after the last wave's wait. A wave whose 64 rows all lie past where the tile
// may store (its group's end, or M) issues nothing, and the stage's upper 128-row A box is loaded
// only where a stored row lies in it (a 129-192 row expert costs 3 waves of MMA, not 4).
// Scales (kScaleSlots): warps of the producer warpgroup (the scale warps) load each stage's As column (a float
// per tile row) and Bs value from global memory into a slot beside the stage and arrives on the
// stage's full barrier with the TMA producer, so the consumers read their scales from shared
// memory right after the barrier: no global loads or pointer steps in the K loop (without the
// scale loads the K loop ran 9% faster at 8192 x 8192 x 4096, bench/NOTES.md). Any As layout.
// Registers: 40 for the producer warpgroup, 232 for each consumer (64 accumulator + 2 x 64 sums),
// 40 * 128 + 232 * 256 = 64512 of the CTA's 65536.
// The dispatcher does not pick it by itself yet; callers force it with config= (dispatch/tall.py).
#include "common/pipeline.cuh"
#include "common/types.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/sync.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"
#include "epilogue.cuh"
#include "scheduler.cuh"

namespace fp8gemm {

namespace tall {
constexpr uint32_t kConsumers = 2;
constexpr uint32_t kWaves = 2;
constexpr uint32_t kWaveRows = kConsumers * kWgmmaM;           // 128 rows: one A box
constexpr uint32_t BLOCK_M = kWaves * kWaveRows;               // 256 rows
constexpr uint32_t BLOCK_K = 128;
constexpr uint32_t kNumThreads = kWarpgroupThreads * (1 + kConsumers);
constexpr uint32_t kProducerRegs = 40;
constexpr uint32_t kConsumerRegs = 232;
constexpr uint32_t kLaunchRegs = (65536 / kNumThreads) / 8 * 8;
constexpr uint32_t kSlotFloats = BLOCK_M + 32;                 // a stage's As column, then Bs (128-byte padded)
static_assert(kProducerRegs * kWarpgroupThreads + kConsumerRegs * kWarpgroupThreads * kConsumers
                  <= kLaunchRegs * kNumThreads, "setmaxnreg would ask for more registers than the CTA holds");
enum Barrier : uint32_t { kEpilogueBarrier0 = 2 /* + consumer warpgroup */ };
template <bool V>
struct Flag {                                   // a bool as a type: a generic lambda's constant
    static constexpr bool value = V;
};
}  // namespace tall

// kScaleSlots: the scales from the scale warps' shared-memory slots (above); false: each consumer
// loads its rows' scales from global memory one K block ahead (the general kernel's way).
// kOneLoop: one K loop that always runs both waves (a dead wave's MMA is done and not stored, the
// upper A box always loaded), against the two loops chosen per tile (bench/NOTES.md asks which).
template <uint32_t BLOCK_N, uint32_t kNumStages, int kOutType, uint32_t kGroupM, bool kTmaStore,
          bool kGrouped = false, bool kScaleSlots = true, bool kOneLoop = false>
__global__ void __launch_bounds__(tall::kNumThreads, 1)
sm90_fp8_gemm_tall_kernel(const __grid_constant__ TmaDescriptor tmap_a,   // A [M, K], box {128, 128}
                          const __grid_constant__ TmaDescriptor tmap_b,   // B [N, K], box {128, BLOCK_N}
                          const __grid_constant__ TmaDescriptor tmap_c,   // C [M, N], box {128 B, 64} (kTmaStore)
                          const float* __restrict__ a_scale, int64_t sa_stride_m, int64_t sa_stride_k,
                          const float* __restrict__ b_scale, int64_t sb_stride_n, int64_t sb_stride_k,
                          void* __restrict__ out, int64_t ldc, uint32_t M, uint32_t N, uint32_t K,
                          const int32_t* __restrict__ groups, uint32_t num_groups, uint32_t group_rows,
                          int64_t sb_stride_g) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace tall;
    constexpr OutType kOut = static_cast<OutType>(kOutType);
    using Mma = WgmmaFp8<BLOCK_N>;
    static_assert(BLOCK_N % 8 == 0 && BLOCK_N >= 8 && kScaleBlock % BLOCK_N == 0, "a tile inside one Bs row");
    static_assert(kNumStages >= 2, "need at least double buffering");

    using Staging = SwizzledStaging<kOut, BLOCK_N>;
    static_assert(!kTmaStore || Staging::kSupported, "TMA store needs BLOCK_N * sizeof(out) % 128 == 0");
    // Grouped: a tile's rows may reach into the next group, so it stores directly, masked at its
    // group's end.
    static_assert(!(kGrouped && kTmaStore), "grouped tiles store directly");
    constexpr uint32_t kBoxBytes = kWaveRows * BLOCK_K;            // 16 KiB: one A box
    constexpr uint32_t SMEM_A_PER_STAGE = kWaves * kBoxBytes;      // 32 KiB
    constexpr uint32_t SMEM_B_PER_STAGE = BLOCK_N * BLOCK_K;
    // [A stages | B stages | C staging | scale slots | full bars | empty bars | grouped: tile prefix [G + 1]]
    using SmemLayout = RingSmem<SMEM_A_PER_STAGE, SMEM_B_PER_STAGE, kNumStages, kTmaStore ? kConsumers * Staging::kBytes : 0,
                                kNumStages * kSlotFloats * 4>;
    extern __shared__ uint8_t smem_raw[];
    const SmemLayout smem(smem_raw);
    Mbarrier* full_bar = smem.full_bar;
    Mbarrier* empty_bar = smem.empty_bar;
    uint32_t* tile_prefix = smem.tail;                         // kGrouped: [G + 1]

    const uint32_t warp_idx = warp_idx_uniform();
    const uint32_t lane_idx = threadIdx.x % 32;
    const uint32_t warpgroup_idx = warp_idx / 4;

    // The producer is lane 0 of warp 1 and, outside the grouped mode, locates its first unit
    // while thread 0 sets up the ring (the general kernel's start, bench/NOTES.md).
    constexpr uint32_t kProducerThread = 32;
    if (!kGrouped && warpgroup_idx == 0) setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0)
        init_tma_ring<kNumStages, kTmaStore>(&tmap_a, &tmap_b, &tmap_c, full_bar, empty_bar, kConsumers * 4,
                                             kScaleSlots ? 2 : 1);
    if constexpr (kGrouped) group_tile_prefix<BLOCK_M>(groups, num_groups, group_rows, M, tile_prefix);
    using Space = RowTileSpace<BLOCK_M, BLOCK_N, kGroupM, kGrouped>;
    const Space space{groups, tile_prefix, num_groups, group_rows, M, N, K};
    const auto make_scheduler = [&]() { return space.scheduler(); };
    const auto tile_rows = [&](const WorkUnit& w) { return space.rows(w); };
    // A unit's loads: its K range, its A boxes' first row, whether the upper box holds a row the
    // tile stores, and its B box's first row.
    struct UnitLoads { WorkUnit w; uint32_t a_row, b_row; bool upper; };
    const auto unit_loads = [&](const typename Space::Scheduler& sched, uint32_t u) {
        UnitLoads l;
        l.w = sched.unit(u);
        const TileRows t = tile_rows(l.w);
        l.a_row = t.row_base;
        l.b_row = t.group * N + l.w.n_block * BLOCK_N;
        l.upper = kOneLoop || t.row_base + kWaveRows < min(t.row_end, M);
        return l;
    };
    typename Space::Scheduler producer_sched;
    UnitLoads producer_first;
    producer_early_start<!kGrouped>(warp_idx == kProducerThread / 32, producer_sched, producer_first, make_scheduler,
                                    unit_loads);
    __syncthreads();

    if (warpgroup_idx == 0) {
        // ================================ producer ================================
        if constexpr (kGrouped) setmaxnreg_dec<kProducerRegs>();
        if (threadIdx.x == kProducerThread) {
            if constexpr (kGrouped) producer_sched = make_scheduler();
            // Rows past M are zero-filled by TMA and never stored.
            producer_walk<kNumStages, !kGrouped>(producer_sched, producer_first, unit_loads, empty_bar,
                                                 [&](const UnitLoads& l, uint32_t kb, uint32_t stage) {
                Mbarrier* bar = &full_bar[stage];
                mbarrier_arrive_expect_tx(bar, (l.upper ? 2u : 1u) * kBoxBytes + SMEM_B_PER_STAGE);
                uint8_t* a_stage = smem.a + stage * SMEM_A_PER_STAGE;
                tma_load_2d(a_stage, &tmap_a, bar, kb * BLOCK_K, l.a_row);
                if (l.upper) tma_load_2d(a_stage + kBoxBytes, &tmap_a, bar, kb * BLOCK_K, l.a_row + kWaveRows);
                tma_load_2d(smem.b + stage * SMEM_B_PER_STAGE, &tmap_b, bar, kb * BLOCK_K, l.b_row);
            });
        } else if (kScaleSlots) {
            // The scale warps (common/pipeline.cuh): the tile's 256 As values and its Bs per stage.
            fill_scale_slots<kNumStages, BLOCK_M, kSlotFloats>(
                make_scheduler(),
                [&](const WorkUnit& w, uint32_t& first, uint32_t& last) {
                    const TileRows t = tile_rows(w);
                    first = t.row_base;
                    last = min(t.row_end, M) - 1;
                },
                [&](const WorkUnit& w) {
                    return b_scale + static_cast<int64_t>(w.n_block * BLOCK_N / kScaleBlock) * sb_stride_n +
                           static_cast<int64_t>(tile_rows(w).group) * sb_stride_g;
                },
                a_scale, sa_stride_m, sa_stride_k, sb_stride_k, full_bar, empty_bar, smem.hold, kProducerThread / 32);
        }
    } else {
        // ================================ consumers ===============================
        setmaxnreg_inc<kConsumerRegs>();
        const auto sched = make_scheduler();
        const uint32_t math_wg = warpgroup_idx - 1;
        const uint32_t warp_in_wg = warp_idx % 4;
        // This thread's accumulator rows inside a wave: r and r + 8 (ptx/wgmma_fp8.cuh); wave v
        // adds 128 * v.
        const uint32_t row_in_wave = math_wg * kWgmmaM + warp_in_wg * 16 + lane_idx / 4;
        float accum[Mma::kNumAccum];
        float total0[Mma::kNumAccum];    // wave 0's running FP32 sum
        float total1[Mma::kNumAccum];    // wave 1's
        PipelineState<kNumStages> pipe;
        const uint32_t lo_a0 = smem_desc_k128b_lo(smem.a + math_wg * kWgmmaM * BLOCK_K);
        const uint32_t lo_b0 = smem_desc_k128b_lo(smem.b);
        constexpr uint32_t kWave1Lo = kBoxBytes >> 4;          // wave 1's rows: the upper box
        const uint32_t full0 = smem_addr(full_bar), empty0 = smem_addr(empty_bar);

        for (uint32_t u = blockIdx.x; u < sched.num_units; u += gridDim.x) {
            const WorkUnit w = sched.unit(u);
            const TileRows t = tile_rows(w);
            const uint32_t row_base = t.row_base;
            const uint32_t row_limit = min(t.row_end, M);
            const uint32_t wg_row0 = row_base + math_wg * kWgmmaM;          // wave 0's first row
            const uint32_t wg_row1 = wg_row0 + kWaveRows;                   // wave 1's
            if (wg_row0 >= row_limit) {          // both waves past the rows: nothing to compute
                pass_stages(w.kb_begin, w.kb_end, pipe, full_bar, empty_bar, lane_idx);
                continue;
            }
            const bool live1 = wg_row1 < row_limit;
            const uint32_t r00 = row_base + row_in_wave, r10 = r00 + kWaveRows;   // each wave's first row
            const uint32_t col0 = w.n_block * BLOCK_N + 2 * (lane_idx % 4);
#pragma unroll
            for (int i = 0; i < Mma::kNumAccum; ++i) {
                total0[i] = 0.0f;
                total1[i] = 0.0f;
            }
            const auto mma_block = [&](uint32_t lo_a, uint32_t lo_b) {
                wgmma_fence_operands(accum);
                wgmma_fence();
#pragma unroll
                for (uint32_t k = 0; k < BLOCK_K / kWgmmaKFp8; ++k) {
                    const uint32_t kstep = (k * kWgmmaKFp8) >> 4;
                    Mma::mma(smem_desc_from_lo(lo_a + kstep), smem_desc_from_lo(lo_b + kstep), accum, k > 0 ? 1u : 0u);
                }
                wgmma_commit_group();
                wgmma_wait<0>();
                wgmma_fence_operands(accum);
            };
            // The K loop, once per wave count: a live-wave test inside the loop cost 9% at 8192 x
            // 8192 x 4096 (ptxas spread the wgmma issue around the branch, bench/NOTES.md).
            const auto k_loop = [&](auto both) {
                constexpr bool kBoth = decltype(both)::value;
                // Scales by loads (not kScaleSlots): each one block ahead, clamped to a row the
                // tile stores; the pointers stay on the unit's last block.
                const auto scale_row = [&](uint32_t r) {
                    return a_scale + static_cast<int64_t>(min(r, row_limit - 1)) * sa_stride_m +
                           static_cast<int64_t>(w.kb_begin) * sa_stride_k;
                };
                const float* pa00 = scale_row(r00);
                const float* pa01 = scale_row(r00 + 8);
                const float* pa10 = scale_row(r10);
                const float* pa11 = scale_row(r10 + 8);
                const float* pb = b_scale + static_cast<int64_t>(w.n_block * BLOCK_N / kScaleBlock) * sb_stride_n +
                                  static_cast<int64_t>(w.kb_begin) * sb_stride_k + static_cast<int64_t>(t.group) * sb_stride_g;
                (void)pb;                                     // read only by the loads
                float la00 = 0.0f, la01 = 0.0f, la10 = 0.0f, la11 = 0.0f, lb0 = 0.0f;
                if constexpr (!kScaleSlots) { la00 = *pa00; la01 = *pa01; la10 = *pa10; la11 = *pa11; lb0 = *pb; }
                for (uint32_t kb = w.kb_begin; kb < w.kb_end; ++kb, ++pipe) {
                    float na00 = 0.0f, na01 = 0.0f, na10 = 0.0f, na11 = 0.0f, nb0 = 0.0f;
                    if constexpr (!kScaleSlots) {
                        const int64_t step = kb + 1 < w.kb_end ? 1 : 0;
                        pa00 += step * sa_stride_k;
                        pa01 += step * sa_stride_k;
                        pa10 += step * sa_stride_k;
                        pa11 += step * sa_stride_k;
                        pb += step * sb_stride_k;
                        na00 = *pa00; na01 = *pa01; na10 = *pa10; na11 = *pa11; nb0 = *pb;
                    }
                    const uint32_t stage = __shfl_sync(0xffffffffu, pipe.stage, 0);
                    mbarrier_wait_parity(full0 + stage * 8u, pipe.full_parity());
                    // This block's scales, read before the stage is released.
                    const float* slot = smem.hold + stage * kSlotFloats;
                    const float b0 = kScaleSlots ? slot[BLOCK_M] : lb0;
                    const float a00 = kScaleSlots ? slot[row_in_wave] : la00;
                    const float a01 = kScaleSlots ? slot[row_in_wave + 8] : la01;
                    const float a10 = kScaleSlots ? slot[row_in_wave + kWaveRows] : la10;
                    const float a11 = kScaleSlots ? slot[row_in_wave + kWaveRows + 8] : la11;
                    const uint32_t lo_a = lo_a0 + stage * (SMEM_A_PER_STAGE >> 4);
                    const uint32_t lo_b = lo_b0 + stage * (SMEM_B_PER_STAGE >> 4);
                    mma_block(lo_a, lo_b);
                    if constexpr (!kBoth) {
                        __syncwarp();
                        mbarrier_arrive_if(empty0 + stage * 8u, lane_idx == 0);
                    }
                    const float s00 = a00 * b0, s01 = a01 * b0;
#pragma unroll
                    for (int i = 0; i < Mma::kNumAccum; ++i) total0[i] += accum[i] * (((i >> 1) & 1) ? s01 : s00);
                    if constexpr (kBoth) {
                        mma_block(lo_a + kWave1Lo, lo_b);
                        __syncwarp();
                        mbarrier_arrive_if(empty0 + stage * 8u, lane_idx == 0);
                        const float s10 = a10 * b0, s11 = a11 * b0;
#pragma unroll
                        for (int i = 0; i < Mma::kNumAccum; ++i) total1[i] += accum[i] * (((i >> 1) & 1) ? s11 : s10);
                    }
                    la00 = na00;
                    la01 = na01;
                    la10 = na10;
                    la11 = na11;
                    lb0 = nb0;
                }
            };
            if (kOneLoop || live1) k_loop(tall::Flag<true>{});
            else k_loop(tall::Flag<false>{});
            // ---- epilogue: each live wave's 64 rows of this warpgroup ----
            if constexpr (kTmaStore) {
                uint8_t* stage = smem.staging + math_wg * Staging::kBytes;
                Staging::store_tile(&tmap_c, stage, kEpilogueBarrier0 + math_wg, warp_in_wg, lane_idx, total0,
                                    w.n_block * BLOCK_N, wg_row0);
                if (live1)
                    Staging::store_tile(&tmap_c, stage, kEpilogueBarrier0 + math_wg, warp_in_wg, lane_idx, total1,
                                        w.n_block * BLOCK_N, wg_row1);
            } else {
                store_fragments_direct<kOut, BLOCK_N>(total0, out, ldc, row_limit, N, r00, col0);
                if (live1) store_fragments_direct<kOut, BLOCK_N>(total1, out, ldc, row_limit, N, r10, col0);
            }
        }
        if constexpr (kTmaStore) {
            if (threadIdx.x % kWarpgroupThreads == 0) tma_store_wait_read<0>();   // as the general kernel
        }
    }
#else
    asm volatile("trap;");
#endif
}

}  // namespace fp8gemm
