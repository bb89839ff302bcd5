// sm90_fp8_gemm_wg3.cu: the general kernel's plain mode with three consumer warpgroups:
// 192 x BLOCK_N tiles, so that three wgmma groups (not two) are queued while one warpgroup crosses
// its per-block gap (wait, barrier arrive, promotion, full-barrier wait, issue), and A + B bytes
// per FLOP drop by 1/6 against 128 x 128 tiles.
//
// Same operands, layouts and result as sm90_fp8_gemm_general.cu (read its header first); plain
// orientation only: no swap-AB, no K split, coarse promotion (bf16 / fp16 out); a grouped mode.
// Per K block each consumer warpgroup runs 4 wgmma m64nBLOCK_Nk32 into one accumulator, waits,
// promotes (the general kernel's lean loop: scales one block ahead, descriptors by 32-bit adds).
// kSlotsA (the plain mode, an M-major As): the producer loads each stage's As row of the tile's
// 192 rows by TMA into a slot beside the stage, and the consumers read their two rows' scales from
// there instead of global memory (general_tiles.cuh's ScaleSource, kScaleSlotsA). Registers: 32 for
// the producer, 160 for each consumer (64 accumulator + 64 sum), 32 * 128 + 160 * 384 = 65536.
// The dispatcher takes it at large M where its estimate wins (dispatch/wg3.py: cost_us). NOTES:
// bench/NOTES.md.
#include "common/pipeline.cuh"
#include "common/types.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/sync.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"
#include "epilogue.cuh"
#include "scheduler.cuh"

namespace fp8gemm {

namespace wg3 {
constexpr uint32_t kConsumers = 3;
constexpr uint32_t BLOCK_M = kConsumers * kWgmmaM;           // 192 rows
constexpr uint32_t BLOCK_K = 128;
constexpr uint32_t kNumThreads = kWarpgroupThreads * (1 + kConsumers);
constexpr uint32_t kProducerRegs = 32;
constexpr uint32_t kConsumerRegs = 160;
constexpr uint32_t kLaunchRegs = (65536 / kNumThreads) / 8 * 8;
static_assert(kProducerRegs * kWarpgroupThreads + kConsumerRegs * kWarpgroupThreads * kConsumers
                  <= kLaunchRegs * kNumThreads, "setmaxnreg would ask for more registers than the CTA holds");
enum Barrier : uint32_t { kEpilogueBarrier0 = 2 /* + consumer warpgroup */ };
}  // namespace wg3

template <uint32_t BLOCK_N, uint32_t kNumStages, int kOutType, uint32_t kGroupM, bool kTmaStore,
          bool kGrouped = false, bool kSlotsA = false>
__global__ void __launch_bounds__(wg3::kNumThreads, 1)
sm90_fp8_gemm_wg3_kernel(const __grid_constant__ TmaDescriptor tmap_a,   // A [M, K], box {128, 192}
                         const __grid_constant__ TmaDescriptor tmap_b,   // B [N, K], box {128, BLOCK_N}
                         const __grid_constant__ TmaDescriptor tmap_c,   // C [M, N], box {128 B, 64} (kTmaStore)
                         const float* __restrict__ a_scale, int64_t sa_stride_m, int64_t sa_stride_k,
                         const float* __restrict__ b_scale, int64_t sb_stride_n, int64_t sb_stride_k,
                         void* __restrict__ out, int64_t ldc, uint32_t M, uint32_t N, uint32_t K,
                         const int32_t* __restrict__ groups, uint32_t num_groups, uint32_t group_rows,
                         int64_t sb_stride_g,
                         // kSlotsA: the M-major As as a TMA map (inner dimension M, box {192, 1}).
                         const __grid_constant__ TmaDescriptor tmap_sa) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace wg3;
    constexpr OutType kOut = static_cast<OutType>(kOutType);
    using Mma = WgmmaFp8<BLOCK_N>;
    static_assert(BLOCK_N % 8 == 0 && BLOCK_N >= 8 && kScaleBlock % BLOCK_N == 0, "a tile inside one Bs row");
    static_assert(kNumStages >= 2, "need at least double buffering");

    using Staging = SwizzledStaging<kOut, BLOCK_N>;
    static_assert(!kTmaStore || Staging::kSupported, "TMA store needs BLOCK_N * sizeof(out) % 128 == 0");
    // Grouped (kGrouped; MoE prefill at 129-192 rows per group, dispatch/grouped.py): the
    // general kernel's grouped mode on 192-row tiles (scheduler.cuh's tile prefix); a tile's 64-row
    // box may reach into the next group, so it stores directly, masked at its group's end.
    static_assert(!(kGrouped && kTmaStore), "grouped tiles store directly");
    static_assert(!(kGrouped && kSlotsA), "As slots: the plain mode");
    constexpr uint32_t SMEM_A_PER_STAGE = BLOCK_M * BLOCK_K;    // 24 KiB
    constexpr uint32_t SMEM_B_PER_STAGE = BLOCK_N * BLOCK_K;
    constexpr uint32_t kSlotBytes = kSlotsA ? BLOCK_M * 4u : 0u;     // a stage's As: a float per tile row
    // [A stages | B stages | C staging | As slots | full bars | empty bars | grouped: tile prefix [G + 1]]
    using SmemLayout = RingSmem<SMEM_A_PER_STAGE, SMEM_B_PER_STAGE, kNumStages, kTmaStore ? kConsumers * Staging::kBytes : 0,
                                kNumStages * kSlotBytes>;
    extern __shared__ uint8_t smem_raw[];
    const SmemLayout smem(smem_raw);
    uint8_t* smem_a = smem.a;
    uint8_t* smem_b = smem.b;
    Mbarrier* full_bar = smem.full_bar;
    Mbarrier* empty_bar = smem.empty_bar;
    uint32_t* tile_prefix = smem.tail;                         // kGrouped: [G + 1]

    const uint32_t warp_idx = warp_idx_uniform();
    const uint32_t lane_idx = threadIdx.x % 32;
    const uint32_t warpgroup_idx = warp_idx / 4;

    // NOTES: as in the general kernel (bench/NOTES.md): the producer is lane 0 of warp
    // 1 and, outside the grouped mode, locates its first unit at its register budget while thread
    // 0 sets up the ring, so that its first TMA issues right after the CTA sync.
    constexpr uint32_t kProducerThread = 32;
    if (!kGrouped && warpgroup_idx == 0) setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
        init_tma_ring<kNumStages, kTmaStore>(&tmap_a, &tmap_b, &tmap_c, full_bar, empty_bar, kConsumers * 4);
        if constexpr (kSlotsA) prefetch_tensormap(&tmap_sa);
    }
    if constexpr (kGrouped) group_tile_prefix<BLOCK_M>(groups, num_groups, group_rows, M, tile_prefix);
    using Space = RowTileSpace<BLOCK_M, BLOCK_N, kGroupM, kGrouped>;
    const Space space{groups, tile_prefix, num_groups, group_rows, M, N, K};
    const auto make_scheduler = [&]() { return space.scheduler(); };
    const auto tile_rows = [&](const WorkUnit& w) { return space.rows(w); };
    // A unit's loads: its K range, its A box's first row and its B box's.
    struct UnitLoads { WorkUnit w; uint32_t a_row, b_row; };
    const auto unit_loads = [&](const typename Space::Scheduler& sched, uint32_t u) {
        UnitLoads l;
        l.w = sched.unit(u);
        const TileRows t = tile_rows(l.w);
        l.a_row = t.row_base;
        l.b_row = t.group * N + l.w.n_block * BLOCK_N;
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
            // NOTES: a box past M is zero-filled by TMA (slowly, bench/NOTES.md; the general
            // kernel moves such boxes up, this kernel does not); rows past M are out of the As map
            // too: zero, and never stored.
            producer_walk<kNumStages, !kGrouped>(producer_sched, producer_first, unit_loads, empty_bar,
                                                 [&](const UnitLoads& l, uint32_t kb, uint32_t stage) {
                Mbarrier* bar = &full_bar[stage];
                mbarrier_arrive_expect_tx(bar, SMEM_A_PER_STAGE + SMEM_B_PER_STAGE + kSlotBytes);
                tma_load_2d(smem_a + stage * SMEM_A_PER_STAGE, &tmap_a, bar, kb * BLOCK_K, l.a_row);
                tma_load_2d(smem_b + stage * SMEM_B_PER_STAGE, &tmap_b, bar, kb * BLOCK_K, l.b_row);
                if constexpr (kSlotsA) tma_load_2d(smem.hold + stage * BLOCK_M, &tmap_sa, bar, l.a_row, kb);
            });
        }
    } else {
        // ================================ consumers ===============================
        setmaxnreg_inc<kConsumerRegs>();
        const auto sched = make_scheduler();
        const uint32_t math_wg = warpgroup_idx - 1;
        const uint32_t warp_in_wg = warp_idx % 4;
        const uint32_t row_in_tile = math_wg * kWgmmaM + warp_in_wg * 16 + lane_idx / 4;
        float accum[Mma::kNumAccum];
        float total[Mma::kNumAccum];
        PipelineState<kNumStages> pipe;
        const uint32_t lo_a0 = smem_desc_k128b_lo(smem_a + math_wg * kWgmmaM * BLOCK_K);
        const uint32_t lo_b0 = smem_desc_k128b_lo(smem_b);
        const uint32_t full0 = smem_addr(full_bar), empty0 = smem_addr(empty_bar);

        for (uint32_t u = blockIdx.x; u < sched.num_units; u += gridDim.x) {
            const WorkUnit w = sched.unit(u);
            const TileRows t = tile_rows(w);
            const uint32_t row_base = t.row_base;
            const uint32_t row_limit = min(t.row_end, M);
            const uint32_t wg_row_base = row_base + math_wg * kWgmmaM;
            // NOTES: grouped, only in a group of one tile: a group's last tile that skipped ran out
            // of step with its siblings, which then read the weights from DRAM again (the general
            // kernel's rule, measured again on this kernel).
            const bool lone_tile = !kGrouped || tile_prefix[t.group + 1] - tile_prefix[t.group] == 1;
            if (wg_row_base >= row_limit && lone_tile) {   // a warpgroup wholly past its rows
                pass_stages(w.kb_begin, w.kb_end, pipe, full_bar, empty_bar, lane_idx);
                continue;
            }
            const uint32_t row0 = row_base + row_in_tile, row1 = row0 + 8;
            const uint32_t col0 = w.n_block * BLOCK_N + 2 * (lane_idx % 4);
            const float* pa0 = a_scale + static_cast<int64_t>(min(row0, row_limit - 1)) * sa_stride_m +
                               static_cast<int64_t>(w.kb_begin) * sa_stride_k;
            const float* pa1 = a_scale + static_cast<int64_t>(min(row1, row_limit - 1)) * sa_stride_m +
                               static_cast<int64_t>(w.kb_begin) * sa_stride_k;
            const float* pb = b_scale + static_cast<int64_t>(w.n_block * BLOCK_N / kScaleBlock) * sb_stride_n +
                              static_cast<int64_t>(w.kb_begin) * sb_stride_k + static_cast<int64_t>(t.group) * sb_stride_g;
            float a0 = 0.0f, a1 = 0.0f, b0 = *pb;
            if constexpr (!kSlotsA) { a0 = *pa0; a1 = *pa1; }
#pragma unroll
            for (int i = 0; i < Mma::kNumAccum; ++i) total[i] = 0.0f;
            // NOTES: unrolled by 2, as the general kernel's lean loop (the prefetched scales land in
            // alternating registers); the grouped mode too since scheduler.cuh's warp-0 prefix
            // (before that prefix, unrolled it spilled 40 bytes, so it ran rolled).
#pragma unroll 2
            for (uint32_t kb = w.kb_begin; kb < w.kb_end; ++kb, ++pipe) {
                // Next block's scales. NOTES: with the As slots, the pointer steps past the unit's
                // last block (unread there) and the barriers go by 32-bit address, as in the
                // general kernel's lean forms; with As by loads those cost 1% here, so the
                // older forms stay (bench/NOTES.md).
                float na0 = a0, na1 = a1, nb0 = b0;
                if constexpr (kSlotsA) {
                    pb += sb_stride_k;
                    if (kb + 1 < w.kb_end) nb0 = *pb;
                } else {
                    const int64_t step = kb + 1 < w.kb_end ? 1 : 0;
                    pa0 += step * sa_stride_k;
                    pa1 += step * sa_stride_k;
                    pb += step * sb_stride_k;
                    na0 = *pa0; na1 = *pa1; nb0 = *pb;
                }
                const uint32_t stage = __shfl_sync(0xffffffffu, pipe.stage, 0);
                if constexpr (kSlotsA) mbarrier_wait_parity(full0 + stage * 8u, pipe.full_parity());
                else mbarrier_wait_parity(&full_bar[stage], pipe.full_parity());
                if constexpr (kSlotsA) {            // this block's, read before the stage is released
                    a0 = smem.hold[stage * BLOCK_M + row_in_tile];
                    a1 = smem.hold[stage * BLOCK_M + row_in_tile + 8];
                }
                const uint32_t lo_a = lo_a0 + stage * (SMEM_A_PER_STAGE >> 4);
                const uint32_t lo_b = lo_b0 + stage * (SMEM_B_PER_STAGE >> 4);
                const float s0 = a0 * b0, s1 = a1 * b0;
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
                __syncwarp();
                if constexpr (kSlotsA) mbarrier_arrive_if(empty0 + stage * 8u, lane_idx == 0);
                else if (lane_idx == 0) mbarrier_arrive(&empty_bar[stage]);
#pragma unroll
                for (int i = 0; i < Mma::kNumAccum; ++i) total[i] += accum[i] * (((i >> 1) & 1) ? s1 : s0);
                a0 = na0;
                a1 = na1;
                b0 = nb0;
            }
            // ---- epilogue ----
            if constexpr (kTmaStore) {
                Staging::store_tile(&tmap_c, smem.staging + math_wg * Staging::kBytes, kEpilogueBarrier0 + math_wg,
                                    warp_in_wg, lane_idx, total, w.n_block * BLOCK_N, wg_row_base);
            } else {
                store_fragments_direct<kOut, BLOCK_N>(total, out, ldc, row_limit, N, row0, col0);
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
