// sm90_fp8_gemm_general.cu: the general W8A8 block-FP8 GEMM for SM90 (H100/H200).
//
// Computes C[M, N] = (A * As) @ (B * Bs)^T with
//   A  [M, K] FP8 E4M3, K-contiguous (row stride a multiple of 16 bytes), read by TMA;
//   B  [N, K] FP8 E4M3, K-contiguous, read by TMA;
//   As [M, ceil(K/128)] fp32, any strides (row-major or M-major are both read in place);
//   Bs [ceil(N/128), ceil(K/128)] fp32, any strides;
//   C  [M, N] bf16 / fp16 / fp32, unit stride along N, row stride ldc.
// FP32 accumulation: each 128-wide K block runs 4 wgmma m64nBLOCK_Nk32 into a fresh accumulator,
// which is then "promoted" into the running FP32 sum with As[row, kb] * Bs[n / 128, kb].
// NOTES: the tensor cores' FP8 accumulation keeps only ~13-14 mantissa bits (measured: ~2e-4
// relative error over one 128-K block). kFinePromotion promotes after every wgmma (K = 32), which
// brings FP32 outputs under 1e-4 at the cost of 4x the promotion FFMAs; the launcher sets it for
// FP32 output only (bf16 / fp16 rounding hides the coarse error).
//
// Which shapes: every legal shape (M >= 1, N >= 1, K a positive multiple of 16); the dispatcher
// gives it everything the specialised variants do not take. Tails in M, N and K are zero-filled by
// TMA out-of-bounds handling and masked in the epilogue. The tokens lie on wgmma's 64-row M side;
// for M <= 64, sm90_fp8_gemm_swap_ab.cu runs the same pipeline with the weights there instead.
//
// Structure (general_tiles.cuh): a persistent grid (at most one CTA per SM) walking work units =
// (tile, K split), see scheduler.cuh; one producer warpgroup feeding a kNumStages TMA ring, two
// consumer warpgroups of 64 rows each. A consumer warpgroup whose 64 rows all lie past M (or past
// its group's end, in a group of one token tile) only passes the stages on.
// Grouped (kGrouped, MoE): see general_tiles.cuh; Bs is [G][ceil(N/128)][ceil(K/128)].
// Split-K (num_splits > 1): split_k.cuh's deterministic reduction by the tile's last split.
// Fused SwiGLU (kSwiGLU, the MoE L1 of fp8gemm.moe, grouped): B is [G * 2I, K] as gate rows then
// up rows; N is I. A tile's B stage holds 64 gate rows and the matching 64 up rows (two TMA boxes
// of 64 rows), each work unit covers 128 act columns as two such sub-tiles run back to back, and
// the epilogue writes SwiGLU(h) requantized to FP8 per 1 x 128 group with its scales
// (swiglu_epilogue.cuh) instead of h.
#include "common/types.cuh"
#include "common/pipeline.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/sync.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"
#include "epilogue.cuh"
#include "general_tiles.cuh"
#include "scheduler.cuh"
#include "split_k.cuh"
#include "swiglu_epilogue.cuh"

namespace fp8gemm {

template <uint32_t BLOCK_N, uint32_t kNumStages, int kOutType, uint32_t kGroupM, bool kFinePromotion,
          bool kTmaStore, bool kGrouped = false, bool kSwiGLU = false, uint32_t kConsumers = 2, int kScaleTma = 0,
          uint32_t kChunk = 0>
__global__ void __launch_bounds__(general::Cta<kConsumers>::kThreads, 1)
sm90_fp8_gemm_general_kernel(const __grid_constant__ TmaDescriptor tmap_a,   // A [M, K], box {128, BLOCK_M}
                             const __grid_constant__ TmaDescriptor tmap_b,   // B [N, K], box {128, BLOCK_N}
                             const __grid_constant__ TmaDescriptor tmap_c,   // C [M, N], box {128 B, 64} (kTmaStore)
                             const float* __restrict__ a_scale, int64_t sa_stride_m, int64_t sa_stride_k,
                             const float* __restrict__ b_scale, int64_t sb_stride_n, int64_t sb_stride_k,
                             void* __restrict__ out, int64_t ldc,
                             uint32_t M, uint32_t N, uint32_t K,
                             uint32_t num_splits,                      // K splits per tile (1: none; kTailSplit: the last wave's, scheduler.cuh)
                             float* __restrict__ workspace,            // [tiles][splits][BLOCK_M*BLOCK_N] if split
                             uint32_t* __restrict__ tile_counters,     // [tiles], zero between launches
                             // kGrouped (MoE, scheduler.cuh): offsets [G + 1] (group_rows == 0) or
                             // counts [G] (masked: group g owns rows g * group_rows ..); B is [G * N, K]
                             // and Bs [G][ceil(N/128)][ceil(K/128)] with group stride sb_stride_g.
                             const int32_t* __restrict__ groups, uint32_t num_groups, uint32_t group_rows,
                             int64_t sb_stride_g,
                             // kSwiGLU: out is the FP8 act [M, N = I] (row pitch ldc bytes), these
                             // its scales [M, I / 128], and the clamp.
                             float* __restrict__ act_scale, float swiglu_limit,
                             // kScaleTma (general::ScaleSource): the M-major As as a TMA map
                             // (inner dimension M, box {BLOCK_M, 1}) and the K-major Bs (inner
                             // dimension K / 128, box {4, 1}).
                             const __grid_constant__ TmaDescriptor tmap_sa,
                             const __grid_constant__ TmaDescriptor tmap_sb) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace general;
    using CtaShape = Cta<kConsumers>;
    constexpr uint32_t BLOCK_M = CtaShape::BLOCK_M;            // 128, or 64 with one consumer
    constexpr uint32_t kNumConsumerWarpgroups = CtaShape::kConsumerWarpgroups;
    constexpr uint32_t kNumConsumerThreads = CtaShape::kConsumerThreads;
    constexpr OutType kOut = static_cast<OutType>(kOutType);
    using Mma = WgmmaFp8<BLOCK_N>;

    // ---- preconditions ------------------------------------------------------------------
    static_assert(BLOCK_N % 8 == 0 && BLOCK_N >= 8 && BLOCK_N <= 128, "wgmma N: 8..256 step 8; <=128 here");
    static_assert(kScaleBlock % BLOCK_N == 0, "a tile must lie inside one 128-row block of Bs");
    static_assert(kNumStages >= 2, "need at least double buffering");
    static_assert(!kSwiGLU || (kGrouped && !kTmaStore && !kFinePromotion && BLOCK_N == 128),
                  "fused SwiGLU: grouped, direct stores, coarse promotion, 64 gate + 64 up columns");
    static_assert(kConsumers == 2 || !(kGrouped || kSwiGLU), "64-row tiles: the plain GEMM only");
    static_assert(kScaleTma == kScaleLoads || !(kGrouped || kSwiGLU || kFinePromotion),
                  "As by TMA, loads in block: the plain GEMM with coarse promotion");
    // kChunk (> 0): the K loop unrolled over chunks of kChunk blocks (see the consumers' loop). The
    // host's rule (dispatch/general.py: chunk_blocks): every unit's K blocks are whole chunks, As
    // and Bs have a unit K stride, and every ring position a chunk starts at is a multiple of
    // kChunk (kNumStages % kChunk == 0) or 0 (kChunk % kNumStages == 0).
    static_assert(kChunk == 0 || (kScaleTma == kScaleLoads && !kGrouped && !kSwiGLU && !kFinePromotion),
                  "the chunked K loop: the plain GEMM's loads, coarse promotion");
    static_assert(kChunk == 0 || (kChunk % 2 == 0 && kChunk >= 4 &&
                                  (kNumStages % kChunk == 0 || kChunk % kNumStages == 0)),
                  "a chunk: two halves of >= 2 blocks, at a fixed ring position");
    constexpr uint32_t kSubTiles = kSwiGLU ? swiglu::kSubTiles : 1;   // sub-tiles per work unit

    // ---- shared memory (general_tiles.cuh) ---------------------------------------------------
    using Staging = StoreStaging<kOut, BLOCK_N>;
    static_assert(!kTmaStore || Staging::kSupported, "TMA store needs BLOCK_N * sizeof(out) of 16, 32, 64 or k * 128");
    // kSwiGLU: sub-tile 0's act values and its rows' amax, [warpgroup][value][thread] floats.
    constexpr uint32_t kHoldPerWarpgroup = kSwiGLU ? (Mma::kNumAccum / 2 + 2) * kWarpgroupThreads : 0;
    // kScaleTma: the hold is the scale slots (ScaleSource), kSlotFloats per stage.
    constexpr bool kSlotsA = (kScaleTma & kScaleSlotsA) != 0, kSlotsB = (kScaleTma & kScaleSlotsB) != 0;
    constexpr bool kCopySlots = (kScaleTma & kScaleCopy) != 0;   // slots filled by the producer warp's cp.async
    static_assert(!kCopySlots || (kSlotsA && kSlotsB), "kScaleCopy fills both slots");
    constexpr bool kWindow = (kScaleTma & kScaleWindow) != 0;    // both scales by windows of 32 K blocks
    static_assert(!kWindow || kScaleTma == kScaleWindow, "kScaleWindow brings both scales, alone");
    using Windows = ScaleWindows<BLOCK_M>;
    constexpr uint32_t kSlotFloats = scale_slot_floats<kScaleTma, BLOCK_M>();
    static_assert(kSlotFloats * kNumStages * 4 % kConsumers == 0 && Windows::kBytes % kConsumers == 0,
                  "the hold is given per consumer");
    constexpr uint32_t kHoldBytes = kWindow ? Windows::kBytes / kConsumers
                                    : kScaleTma != kScaleLoads ? kNumStages * kSlotFloats * 4u / kConsumers
                                                               : kHoldPerWarpgroup * static_cast<uint32_t>(sizeof(float));
    using SmemLayout = Smem<BLOCK_N, kNumStages, kTmaStore ? Staging::kBytes : 0, kHoldBytes, kConsumers>;
    constexpr uint32_t SMEM_A_PER_STAGE = BLOCK_M * BLOCK_K;   // 16 KiB (8 with one consumer), 1 byte per FP8
    constexpr uint32_t SMEM_B_PER_STAGE = BLOCK_N * BLOCK_K;
    extern __shared__ uint8_t smem_raw[];
    const SmemLayout smem(smem_raw);
    static_assert(!kWindow || (SmemLayout::kTileBytes + (kTmaStore ? kConsumers * Staging::kBytes : 0u)) % 1024 == 0,
                  "the swizzled As windows need a 1024-byte aligned hold");
    const Windows windows{smem.hold};
    uint32_t* tile_prefix = smem.tail;                         // kGrouped: [G + 1]

    const uint32_t warp_idx = warp_idx_uniform();
    const uint32_t lane_idx = threadIdx.x % 32;
    const uint32_t warpgroup_idx = warp_idx / 4;

    constexpr uint32_t kMaxBoxShift =
        general_max_box_shift<kNumStages, SMEM_B_PER_STAGE, kTmaStore ? kNumConsumerWarpgroups * Staging::kBytes : 0>();
    using Tiles = GeneralTiles<BLOCK_N, kGroupM, false, kGrouped, kSwiGLU, kMaxBoxShift, BLOCK_M>;
    const Tiles tiles{M, N, K, num_splits, groups, tile_prefix, num_groups, group_rows};

    typename Tiles::Scheduler producer_sched;
    UnitLoads producer_first;
    // NOTES: the producer locates its first unit before the CTA sync, except in the grouped mode
    // (whose scheduler needs the tile prefix) and under split-K (small tiles: there the consumers'
    // own set-up and scale loads are the first stage's critical path, and holding them at the CTA
    // sync while the producer located its unit cost 2-6%, bench/NOTES.md).
    const bool early_start = !kGrouped && num_splits == 1;
    if ((kWindow || (kSlotsA && !kCopySlots)) && threadIdx.x == 0) prefetch_tensormap(&tmap_sa);
    if ((kWindow || (kSlotsB && !kCopySlots)) && threadIdx.x == 0) prefetch_tensormap(&tmap_sb);
    if (kWindow && threadIdx.x == 0) {           // fenced with the ring's barriers (init_tma_ring)
        for (uint32_t i = 0; i < 2; ++i) {
            mbarrier_init(windows.full(i), 1);
            mbarrier_init(windows.empty(i), Tiles::kConsumerWarps);
        }
    }
    general_cta_start<kNumStages, kTmaStore, kGrouped>(tiles, smem, tile_prefix, &tmap_a, &tmap_b, &tmap_c, warp_idx,
                                                        early_start, producer_sched, producer_first,
                                                        1u + (kCopySlots ? kScaleCopyArrivals : 0u));
    if (warpgroup_idx == 0) {
        general_producer<kNumStages, kSubTiles, kSwiGLU, kGrouped, kScaleTma>(tiles, smem, &tmap_a, &tmap_b,
                                                                              early_start, producer_sched,
                                                                              producer_first, &tmap_sa, &tmap_sb,
                                                                              smem.hold,
                                                                              ScaleCopySrc{a_scale, sa_stride_m, sa_stride_k,
                                                                                           b_scale, sb_stride_n, sb_stride_k});
    } else {
        // ================================ consumers ===============================
        setmaxnreg_inc<kConsumerRegs>();
        const auto sched = tiles.scheduler();
        const uint32_t math_wg = warpgroup_idx - 1;      // which 64-row half of the tile
        const uint32_t warp_in_wg = warp_idx % 4;
        const uint32_t consumer_tid = threadIdx.x - kWarpgroupThreads;   // 0..255
        // NOTES: in the lean two-accumulator loop (coarse promotion) the two warpgroups pass named
        // barrier kOrderBarrier around each K block's wgmma issue, warpgroup 0 before issuing and
        // warpgroup 1 after, so their blocks reach the tensor cores in a fixed alternation
        // (cuBLASLt's kernel does the same: ncu source counters, bench/NOTES.md).
        // Measured 1-3% faster at large M. A warpgroup that skips a tile passes it too. One
        // consumer has no one to alternate with.
        constexpr bool kOrderedIssue = !kFinePromotion && kNumConsumerWarpgroups > 1;
        // Accumulator rows of this thread inside the tile: r and r + 8 (see ptx/wgmma_fp8.cuh).
        const uint32_t row_in_tile = math_wg * kWgmmaM + warp_in_wg * 16 + lane_idx / 4;

        float accum[Mma::kNumAccum];   // one promotion group of this warpgroup's 64 x BLOCK_N
        float total[Mma::kNumAccum];   // running FP32 sum after scale promotion
        PipelineState<kNumStages> pipe;
        PipelineState<2> wpipe;        // kWindow: the scale window of the block being read
        // kWindow: a unit's first block and every 32nd open a window (wait for its TMA), its last
        // block and every 32nd from 31 on close it (this warp's arrival on its empty barrier).
        const auto window_opens = [](uint32_t kb, const WorkUnit& u) { return kb == u.kb_begin || kb % Windows::kBlocks == 0; };
        const auto window_closes = [](uint32_t kb, const WorkUnit& u) {
            return kb + 1 == u.kb_end || kb % Windows::kBlocks == Windows::kBlocks - 1;
        };

        // Passes: each work unit's kSubTiles sub-tiles in turn (one, unless kSwiGLU), then this
        // CTA's next unit gridDim.x further on.
        for (uint32_t pass = blockIdx.x * kSubTiles; pass < sched.num_units * kSubTiles;
             pass += (pass % kSubTiles + 1 == kSubTiles) ? (gridDim.x - 1) * kSubTiles + 1 : 1) {
            const uint32_t u = pass / kSubTiles;
            const uint32_t sub = pass % kSubTiles;
            const WorkUnit w = sched.unit(u);
            const TileSpan t = tiles.span(w);
            uint32_t a_row, a_shift;
            tiles.a_box(t, a_row, a_shift);
            // The rows (tokens) this tile may store: M, or (grouped) the end of its group, whose
            // next rows belong to another group's tile.
            const uint32_t row_limit = t.row_end;
            // A warpgroup whose 64 rows all lie past the rows the tile may store (an M tail, or a
            // group of <= 64 rows) has nothing to compute or store. Not under split-K, whose
            // epilogue synchronizes both warpgroups. Grouped, only in a group of one token tile.
            // NOTES: the last tile of a group of two or more then ran faster than its sibling
            // tiles, which read the same B tiles and share them in L2 only while they run in step:
            // the MoE L1 at 8192 tokens (192 rows per expert) read 9.7 GB from DRAM instead of 6.5
            // and took 24% longer (bench/NOTES.md); groups of one tile have no sibling
            // (48 rows per expert: 6% faster).
            const bool lone_tile = !kGrouped || tile_prefix[t.group + 1] - tile_prefix[t.group] == 1;
            if (w.num_splits == 1 && lone_tile && t.row_base + math_wg * kWgmmaM >= row_limit) {
                pass_stages<kOrderedIssue>(w.kb_begin, w.kb_end, pipe, smem.full_bar, smem.empty_bar, lane_idx,
                                           CtaShape::kOrderBarrier, kNumConsumerThreads, [&](uint32_t kb) {
                    if constexpr (kWindow) {   // the windows are passed on too, each after its TMA landed
                        if (window_opens(kb, w)) mbarrier_wait_parity(windows.full(wpipe.stage), wpipe.full_parity());
                        if (window_closes(kb, w)) {
                            if (lane_idx == 0) mbarrier_arrive(windows.empty(wpipe.stage));
                            ++wpipe;
                        }
                    }
                });
                continue;
            }
            const uint32_t row0 = t.row_base + row_in_tile;
            const uint32_t row1 = row0 + 8;
            // Scale reads clamp to a valid token: tokens past the limit are never stored (past M
            // they are zero in A). As per tile row, one Bs per tile.
            const float* sa_row0 = a_scale + static_cast<int64_t>(min(row0, row_limit - 1)) * sa_stride_m;
            const float* sa_row1 = a_scale + static_cast<int64_t>(min(row1, row_limit - 1)) * sa_stride_m;
            const uint32_t sb_block = w.n_block * BLOCK_N / kScaleBlock;
            const float* sb_row = b_scale + static_cast<int64_t>(sb_block) * sb_stride_n +
                                  (kGrouped ? static_cast<int64_t>(t.group) * sb_stride_g : 0);
            const uint32_t col0 = t.col_base + 2 * (lane_idx % 4);   // this thread's first column
#pragma unroll
            for (int i = 0; i < Mma::kNumAccum; ++i) total[i] = 0.0f;

            if (w.kb_begin == w.kb_end) {
                // An empty K split (splits > K blocks): its partial is zero; touch no scale.
            } else {
                // The K loop is issue-bound at large M, so per K block it runs 4 wgmma, 3 scale
                // loads, 2 FMUL and the promotion FFMAs, and little else. Scale pointers advance by
                // one K block per iteration and the next block's scales are loaded one iteration
                // ahead; descriptors move by 32-bit adds (bench/NOTES.md).
                const float* pa0 = sa_row0 + static_cast<int64_t>(w.kb_begin) * sa_stride_k;
                const float* pa1 = sa_row1 + static_cast<int64_t>(w.kb_begin) * sa_stride_k;
                const float* pb = sb_row + static_cast<int64_t>(w.kb_begin) * sb_stride_k;
                // kSwiGLU: the up rows' scales sit N / 128 scale blocks after the gate rows' (an
                // offset from kernel parameters, recomputed per load: no loop-carried pointer).
                const auto up_scale = [&](const float* gate) {
                    return gate[static_cast<int64_t>(N / kScaleBlock) * sb_stride_n];
                };
                // kScaleTma: As and / or Bs come from the stage's slots (read after its full
                // barrier), the others from global memory.
                float a0 = 0.0f, a1 = 0.0f, b0 = 0.0f;               // this block's raw scales
                if constexpr (!kSlotsA && !kWindow) { a0 = *pa0; a1 = *pa1; }
                if constexpr (!kSlotsB && !kWindow) b0 = *pb;
                // kWindow: this thread's two rows in the unit's open window (rows r and r + 8 share
                // r % 8, so one XOR finds both swizzled chunks), and the block that closes it.
                const uint32_t win_xor = (row_in_tile & 7u) << 2;
                const float* win_a = windows.a(wpipe.stage) + row_in_tile * Windows::kBlocks;
                const float* win_b = windows.b(wpipe.stage);
                uint32_t win_close = min(w.kb_begin | (Windows::kBlocks - 1), w.kb_end - 1);
                if constexpr (kWindow) mbarrier_wait_parity(windows.full(wpipe.stage), wpipe.full_parity());
                const uint32_t lo_a0 = smem_desc_k128b_lo(smem.a + (math_wg * kWgmmaM + a_shift) * BLOCK_K);
                const uint32_t lo_b0 = smem_desc_k128b_lo(smem.b);
                if constexpr (kChunk > 0) {
                    // NOTES: the chunked K loop. A unit's blocks run in chunks of kChunk, each
                    // unrolled, so a block's ring stage (the chunk's base + its index), phase,
                    // barrier addresses and descriptor offsets are constants from one uniform base
                    // per chunk, and its scales sit in registers named at compile time: a half of
                    // the chunk's blocks per register set, As rows r and r + 8 and Bs, at unit K
                    // stride (immediate offsets). Each set is loaded in one burst right after the
                    // first promotion that reads the other set, a half chunk ahead of its own first
                    // use: the loop's loads share one scoreboard, which the first read of a loaded
                    // register waits on to zero, so a burst issued after that read is never waited
                    // for by the reads of the set before it. The bursts are volatile asm: as plain
                    // loads ptxas moved them next to their use, and the loop ran 6% slower than the
                    // rolled one instead of 1.4% faster (bench/NOTES.md). Two accumulators in turn,
                    // as in the loop below.
                    constexpr uint32_t kHalf = kChunk / 2;
                    float acc2[Mma::kNumAccum];
                    float s_a0[2][kHalf], s_a1[2][kHalf], s_b[2][kHalf];   // [set][block of the half]
#pragma unroll
                    for (uint32_t j = 0; j < kHalf; ++j) { s_a0[0][j] = pa0[j]; s_a1[0][j] = pa1[j]; s_b[0][j] = pb[j]; }
                    const uint32_t full0 = smem_addr(smem.full_bar), empty0 = smem_addr(smem.empty_bar);
                    // Shuffled: ptxas then knows them warp-uniform and builds the descriptors in
                    // uniform registers (no R2UR per wgmma operand).
                    const uint32_t lo_a0u = __shfl_sync(0xffffffffu, lo_a0, 0), lo_b0u = __shfl_sync(0xffffffffu, lo_b0, 0);
                    const uint32_t num_chunks = (w.kb_end - w.kb_begin) / kChunk;
                    const auto promote_block = [&](float (&acc)[Mma::kNumAccum], uint32_t set, uint32_t j) {
                        const float t0 = s_a0[set][j] * s_b[set][j], t1 = s_a1[set][j] * s_b[set][j];
#pragma unroll
                        for (int i = 0; i < Mma::kNumAccum; ++i) total[i] += acc[i] * (((i >> 1) & 1) ? t1 : t0);
                    };
                    const auto load_set = [&](uint32_t set, uint32_t first_block) {
#pragma unroll
                        for (uint32_t j = 0; j < kHalf; ++j) {
                            s_a0[set][j] = ld_nc_f32_pinned(pa0 + first_block + j);
                            s_a1[set][j] = ld_nc_f32_pinned(pa1 + first_block + j);
                            s_b[set][j] = ld_nc_f32_pinned(pb + first_block + j);
                        }
                    };
                    // A chunk's place in the ring: its first stage's barriers and descriptors (warp-
                    // uniform) and phase; a block's are these plus constants.
                    struct ChunkAt { uint32_t full, empty, lo_a, lo_b, phase; };
                    const auto chunk_at = [&](uint32_t base, uint32_t phase) {
                        return ChunkAt{full0 + base * 8u, empty0 + base * 8u, lo_a0u + base * (SMEM_A_PER_STAGE >> 4),
                                       lo_b0u + base * (SMEM_B_PER_STAGE >> 4), phase};
                    };
                    // Block j of the chunk at ``at`` into cur while the block before it (in prev) is
                    // promoted (none before the unit's first: first). next: kChunk where a chunk
                    // follows this one, else 0 (its first half's scales are then loaded again from
                    // this chunk: no branch, no load past the unit).
                    const auto block = [&](uint32_t j, const ChunkAt& at, float (&cur)[Mma::kNumAccum],
                                           float (&prev)[Mma::kNumAccum], bool first, uint32_t next) {
                        const uint32_t s = j % kNumStages;
                        mbarrier_wait_parity(at.full + s * 8u, at.phase ^ ((j / kNumStages) & 1u));
                        const uint32_t lo_a = at.lo_a + s * (SMEM_A_PER_STAGE >> 4);
                        const uint32_t lo_b = at.lo_b + s * (SMEM_B_PER_STAGE >> 4);
                        if (kOrderedIssue && math_wg == 0)
                            named_barrier_sync_unaligned(CtaShape::kOrderBarrier, kNumConsumerThreads);
                        wgmma_fence_operands(cur);
                        wgmma_fence();
#pragma unroll
                        for (uint32_t k = 0; k < BLOCK_K / kWgmmaKFp8; ++k) {
                            const uint32_t kstep = (k * kWgmmaKFp8) >> 4;
                            Mma::mma(smem_desc_from_lo(lo_a + kstep), smem_desc_from_lo(lo_b + kstep), cur, k > 0 ? 1u : 0u);
                        }
                        wgmma_commit_group();
                        if (kOrderedIssue && math_wg == 1)
                            named_barrier_sync_unaligned(CtaShape::kOrderBarrier, kNumConsumerThreads);
                        // No branch from here to the wait: ptxas waits for the wgmma before one.
                        if (j == 0) {
                            if (!first) promote_block(prev, 1, kHalf - 1);     // the chunk before's last block
                        } else {
                            promote_block(prev, (j - 1) / kHalf, (j - 1) % kHalf);
                        }
                        // Orders the promotion before the wait in the PTX; ptxas may still move
                        // its FFMAs past the wait (seen in the SASS of 128 x 128 tiles).
                        wgmma_fence_operands(total);
                        if (j == 1) load_set(1, kHalf);                        // this chunk's second half
                        if (j == kHalf + 1) load_set(0, next);                 // the next chunk's first half
                        wgmma_wait<0>();
                        wgmma_fence_operands(cur);
                        __syncwarp();
                        mbarrier_arrive_if(at.empty + s * 8u, lane_idx == 0);
                    };
                    // Where the next chunk starts: kStagesFixed, every chunk at stage 0 (the stage
                    // index wraps inside it), the phase flipping every kNumStages blocks; else at
                    // the next multiple of kChunk.
                    constexpr bool kStagesFixed = kChunk % kNumStages == 0;
                    const auto next_base = [](uint32_t base) {
                        return kStagesFixed || base + kChunk == kNumStages ? 0u : base + kChunk;
                    };
                    const auto next_phase = [](uint32_t base, uint32_t phase) {
                        return kStagesFixed ? phase ^ ((kChunk / kNumStages) & 1u)
                                            : phase ^ (base + kChunk == kNumStages ? 1u : 0u);
                    };
                    const auto ring_base = [&]() { return __shfl_sync(0xffffffffu, pipe.stage, 0); };
                    // The loop is rotated so that no chunk's first block waits behind a branch:
                    // each pass runs blocks 1 .. kChunk - 1 of a chunk, then block 0 of the next.
                    block(0, chunk_at(ring_base(), pipe.phase), accum, acc2, true, 0u);
                    for (uint32_t c = 0;; ++c) {
                        const uint32_t base = ring_base(), phase = pipe.phase;
                        const ChunkAt at = chunk_at(base, phase);
                        const bool more = c + 1 < num_chunks;
                        const uint32_t next = more ? kChunk : 0u;
#pragma unroll
                        for (uint32_t j = 1; j < kChunk; j += 2) {
                            block(j, at, acc2, accum, false, next);
                            if (j + 1 < kChunk) block(j + 1, at, accum, acc2, false, next);
                        }
                        pipe.stage = next_base(base);
                        pipe.phase = next_phase(base, phase);
                        pa0 += kChunk;
                        pa1 += kChunk;
                        pb += kChunk;
                        if (!more) break;
                        block(0, chunk_at(pipe.stage, pipe.phase), accum, acc2, false, 0u);
                    }
                    promote_block(acc2, 1, kHalf - 1);
                } else if constexpr (!kFinePromotion) {
                    // Two accumulators in turn: block kb's wgmma run into one while the other's
                    // block kb-1 is promoted; nothing is in flight across the loop's back edge.
                    float acc2[Mma::kNumAccum];
                    float pa0v = 0.0f, pa1v = 0.0f, pbv = 0.0f, pbvu = 0.0f;   // raw scales of the pending block
                    // NOTES: kScaleLoadsInBlock loads each block's scales in its own half of the
                    // loop straight into the pending registers (its promotion, one half later, is
                    // their first use), the first block's before the loop: no select, branch or
                    // copy per block for the unit's end, 10-20 fewer instructions per block. On
                    // units of 8 K blocks (one 32-byte sector of a K-major As row) measured up to
                    // 6% faster on 128-row and narrow 64-row tiles; at K = 4096, where every
                    // eighth block's As misses L1, the shorter lead of the loads cost 3-9% on
                    // 64-row tiles (bench/NOTES.md), so longer units keep the loads a block ahead.
                    constexpr bool kLoadsInBlock = kScaleTma == kScaleLoadsInBlock;
                    if constexpr (kLoadsInBlock) {
                        pa0v = a0; pa1v = a1; pbv = b0;
                        pa0 += sa_stride_k;    // the pointers step past the unit's last block; nothing is read there
                        pa1 += sa_stride_k;
                        pb += sb_stride_k;
                    }
                    // NOTES: the lean forms (barriers by 32-bit address, a predicated arrival,
                    // next-block scale loads behind a branch) win 2-11% on 64 x 64 and wider 64-row
                    // tiles and with the As slots, and cost 1-4% on 128-row and 64 x 32 tiles
                    // with As by loads, where the older forms stay (bench/NOTES.md); the in-block
                    // loads were measured with the lean forms.
                    constexpr bool kLean = (kConsumers == 1 && BLOCK_N >= 64) || kScaleTma != kScaleLoads;
                    // NOTES: on windowed tiles of 128 columns a block's finish() waits for the next
                    // stage's full barrier before its wgmma wait, so that the path from that wait to
                    // the next block's first wgmma holds no poll: measured 7-11% faster on 64 x 128
                    // and 4-5% on 128 x 128; as a patch, 0-4% slower on narrower tiles (bench/NOTES.md).
                    constexpr bool kPollAhead = kWindow && BLOCK_N == 128;
                    const uint32_t full0 = smem_addr(smem.full_bar), empty0 = smem_addr(smem.empty_bar);
                    // first: the unit's first block, whose full barrier no finish() has polled.
                    const auto issue = [&](float (&acc)[Mma::kNumAccum], bool first) {
                        const uint32_t stage = __shfl_sync(0xffffffffu, pipe.stage, 0);
                        if constexpr (kPollAhead) { if (first) mbarrier_wait_parity(full0 + stage * 8u, pipe.full_parity()); }
                        else if constexpr (kLean) mbarrier_wait_parity(full0 + stage * 8u, pipe.full_parity());
                        else mbarrier_wait_parity(&smem.full_bar[stage], pipe.full_parity());
                        const uint32_t lo_a = lo_a0 + stage * (SMEM_A_PER_STAGE >> 4);
                        const uint32_t lo_b = lo_b0 + stage * (SMEM_B_PER_STAGE >> 4);
                        if (kOrderedIssue && math_wg == 0)
                            named_barrier_sync_unaligned(CtaShape::kOrderBarrier, kNumConsumerThreads);
                        wgmma_fence_operands(acc);
                        wgmma_fence();
#pragma unroll
                        for (uint32_t k = 0; k < BLOCK_K / kWgmmaKFp8; ++k) {
                            const uint32_t kstep = (k * kWgmmaKFp8) >> 4;
                            Mma::mma(smem_desc_from_lo(lo_a + kstep), smem_desc_from_lo(lo_b + kstep), acc, k > 0 ? 1u : 0u);
                        }
                        wgmma_commit_group();
                        if (kOrderedIssue && math_wg == 1)
                            named_barrier_sync_unaligned(CtaShape::kOrderBarrier, kNumConsumerThreads);
                        return stage;
                    };
                    // more: a block of the unit follows (kPollAhead polls its stage here).
                    const auto finish = [&](float (&acc)[Mma::kNumAccum], uint32_t stage, bool more) {
                        if constexpr (kPollAhead) {
                            ++pipe;
                            if (more) mbarrier_wait_parity(full0 + __shfl_sync(0xffffffffu, pipe.stage, 0) * 8u,
                                                           pipe.full_parity());
                        }
                        wgmma_wait<0>();
                        wgmma_fence_operands(acc);
                        __syncwarp();
                        if constexpr (kLean) mbarrier_arrive_if(empty0 + stage * 8u, lane_idx == 0);
                        else if (lane_idx == 0) mbarrier_arrive(&smem.empty_bar[stage]);
                        if constexpr (!kPollAhead) ++pipe;
                    };
                    const auto promote = [&](float (&acc)[Mma::kNumAccum]) {
                        const float t0 = pa0v * pbv, t1 = pa1v * pbv;
                        // kSwiGLU: columns from kNumAccum / 2 on are up rows, with their own Bs.
                        const float u0 = kSwiGLU ? pa0v * pbvu : t0, u1 = kSwiGLU ? pa1v * pbvu : t1;
#pragma unroll
                        for (int i = 0; i < Mma::kNumAccum; ++i)
                            total[i] += acc[i] * (i < Mma::kNumAccum / 2 ? (((i >> 1) & 1) ? t1 : t0)
                                                                         : (((i >> 1) & 1) ? u1 : u0));
                    };
                    // Load block kb's raw scales into the pending registers (after promote used them).
                    // kScaleTma: from the slots of ``stage``, which hold block kb until this warp's
                    // finish() releases it.
                    const auto take_scales = [&](uint32_t kb, uint32_t stage) {
                        if constexpr (kWindow) {
                            const float* wa = win_a + ((kb % Windows::kBlocks) ^ win_xor);
                            pa0v = wa[0];
                            pa1v = wa[8 * Windows::kBlocks];
                            pbv = win_b[kb % Windows::kBlocks];
                            if (kb == win_close) {
                                __syncwarp();      // every lane's reads before the warp's arrival
                                if (lane_idx == 0) mbarrier_arrive(windows.empty(wpipe.stage));
                                ++wpipe;
                                // The next window's TMA left when the producer reached its first
                                // block, a ring ahead: waited here, it has landed.
                                if (kb + 1 < w.kb_end) mbarrier_wait_parity(windows.full(wpipe.stage), wpipe.full_parity());
                                win_close = min(kb + Windows::kBlocks, w.kb_end - 1);
                                win_a = windows.a(wpipe.stage) + row_in_tile * Windows::kBlocks;
                                win_b = windows.b(wpipe.stage);
                            }
                            (void)stage;
                            return;
                        }
                        if constexpr (kLoadsInBlock) {
                            (void)kb;
                            (void)stage;
                            pa0v = *pa0; pa1v = *pa1; pbv = *pb;
                            pa0 += sa_stride_k;
                            pa1 += sa_stride_k;
                            pb += sb_stride_k;
                            return;
                        }
                        if constexpr (kSlotsA) {
                            const float* slot = smem.hold + stage * BLOCK_M;
                            a0 = slot[row_in_tile];
                            a1 = slot[row_in_tile + 8];
                        }
                        if constexpr (kSlotsB)
                            b0 = smem.hold[(kSlotsA ? kNumStages * BLOCK_M : 0u) + stage * kBSlotFloats + (kb & 3u)];
                        pa0v = a0; pa1v = a1; pbv = b0;
                        // kSwiGLU: the up rows' scale is loaded here, not a block ahead (one
                        // register fewer across the loop; it is used after the next block's issue).
                        if constexpr (kSwiGLU) pbvu = up_scale(pb);
                        if constexpr (kLean) {
                            // The pointers step past the unit's last block; nothing is read there.
                            if constexpr (!kSlotsA) {
                                pa0 += sa_stride_k;
                                pa1 += sa_stride_k;
                            }
                            if constexpr (!kSlotsB) pb += sb_stride_k;
                            if (kb + 1 < w.kb_end) {
                                if constexpr (!kSlotsA) { a0 = *pa0; a1 = *pa1; }
                                if constexpr (!kSlotsB) b0 = *pb;
                            }
                        } else {
                            // The last block re-reads its own scales: loads with no branch.
                            const int64_t step = kb + 1 < w.kb_end ? 1 : 0;
                            pa0 += step * sa_stride_k;
                            pa1 += step * sa_stride_k;
                            pb += step * sb_stride_k;
                            a0 = *pa0; a1 = *pa1; b0 = *pb;
                        }
                    };
                    uint32_t kb = w.kb_begin;
                    {
                        const uint32_t st = issue(accum, true);
                        if constexpr (kLoadsInBlock) {          // its scales were loaded before the loop
                            finish(accum, st, kb + 1 < w.kb_end);
                        } else if constexpr (kScaleTma == kScaleLoads) {
                            finish(accum, st, kb + 1 < w.kb_end);
                            take_scales(kb, st);
                        } else {                    // the slot before finish() releases the stage
                            take_scales(kb, st);
                            finish(accum, st, kb + 1 < w.kb_end);
                        }
                    }
                    ++kb;
                    // NOTES: the loop's two halves mirror each other with the accumulators' roles
                    // swapped, so that each array keeps fixed registers (no copies, no dynamic index).
                    while (true) {
                        if (kb == w.kb_end) { promote(accum); break; }
                        {
                            const uint32_t st = issue(acc2, false);
                            promote(accum);
                            take_scales(kb, st);
                            finish(acc2, st, kb + 1 < w.kb_end);
                        }
                        ++kb;
                        if (kb == w.kb_end) { promote(acc2); break; }
                        {
                            const uint32_t st = issue(accum, false);
                            promote(acc2);
                            take_scales(kb, st);
                            finish(accum, st, kb + 1 < w.kb_end);
                        }
                        ++kb;
                    }
                } else {
                // NOTES: unrolled by 2 so that the prefetched scales land in alternating registers;
                // rolled, ptxas copied the fresh load into the loop-carried register at the end of the
                // same iteration and stalled there on its latency (ncu: 25% of the loop's samples).
#pragma unroll 2
                for (uint32_t kb = w.kb_begin; kb < w.kb_end; ++kb, ++pipe) {
                    // Next block's scales (the last iteration re-reads its own: always in bounds).
                    const int64_t step = kb + 1 < w.kb_end ? 1 : 0;
                    pa0 += step * sa_stride_k;
                    pa1 += step * sa_stride_k;
                    pb += step * sb_stride_k;
                    const float na0 = *pa0, na1 = *pa1, nb0 = *pb;
                    // NOTES: the shuffle tells ptxas the stage is warp-uniform, so the descriptors
                    // are built in uniform registers (no R2UR per wgmma operand).
                    const uint32_t stage = __shfl_sync(0xffffffffu, pipe.stage, 0);
                    mbarrier_wait_parity(&smem.full_bar[stage], pipe.full_parity());
                    const uint32_t lo_a = lo_a0 + stage * (SMEM_A_PER_STAGE >> 4);
                    const uint32_t lo_b = lo_b0 + stage * (SMEM_B_PER_STAGE >> 4);
                    // Fine promotion: one promotion group per wgmma (K = 32).
                    constexpr uint32_t kMmasPerBlock = BLOCK_K / kWgmmaKFp8;
                    const float s0 = a0 * b0, s1 = a1 * b0;
#pragma unroll
                    for (uint32_t k = 0; k < kMmasPerBlock; ++k) {
                        wgmma_fence_operands(accum);
                        wgmma_fence();
                        const uint32_t kstep = (k * kWgmmaKFp8) >> 4;
                        Mma::mma(smem_desc_from_lo(lo_a + kstep), smem_desc_from_lo(lo_b + kstep), accum, 0u);
                        wgmma_commit_group();
                        wgmma_wait<0>();
                        wgmma_fence_operands(accum);
                        if (k + 1 == kMmasPerBlock) {
                            __syncwarp();
                            if (lane_idx == 0) mbarrier_arrive(&smem.empty_bar[stage]);
                        }
#pragma unroll
                        for (int i = 0; i < Mma::kNumAccum; ++i) total[i] += accum[i] * (((i >> 1) & 1) ? s1 : s0);
                    }
                    a0 = na0;
                    a1 = na1;
                    b0 = nb0;
                }
                }
            }

            // ---- split-K: publish this split's partial; the last split of the tile reduces ----
            if (!kSwiGLU && w.num_splits > 1) {
                const bool has_rows = row0 < M;
                if (!split_k_publish<BLOCK_M * BLOCK_N, kNumConsumerThreads>(total, workspace, tile_counters, w.tile_idx,
                                                                             w.ws_slot, w.split_idx, w.num_splits,
                                                                             has_rows, consumer_tid, kConsumerBarrier))
                    continue;                                    // another split finishes the tile
                split_k_sum<BLOCK_M * BLOCK_N, kNumConsumerThreads>(total, workspace, w.ws_slot, w.num_splits, has_rows,
                                                                    consumer_tid);
            }

            // ---- epilogue ----------------------------------------------------------------------
            const uint32_t wg_row_base = t.row_base + math_wg * kWgmmaM;
            if constexpr (kSwiGLU) {
                // Act columns 128 * n_block + 64 * sub ..; the unit's group of 128 is n_block.
                swiglu_quant_epilogue(total, sub, smem.hold + math_wg * kHoldPerWarpgroup, threadIdx.x % kWarpgroupThreads,
                                      swiglu_limit, static_cast<uint8_t*>(out), ldc, act_scale,
                                      N / kScaleBlock, w.n_block, row0, row_limit, col0);
            } else if (kTmaStore && kGrouped && wg_row_base < row_limit && wg_row_base + kWgmmaM > row_limit) {
                // A warpgroup across its group's end: TMA would clip only at M, so mask the rows.
                store_fragments_direct<kOut, BLOCK_N>(total, out, ldc, row_limit, N, row0, col0);
            } else if constexpr (kTmaStore) {
                // Stage through swizzled shared memory, then one bulk store per 128-byte chunk.
                if (wg_row_base < row_limit)              // a warpgroup wholly past M has nothing
                    staged_store_tile<Staging>(&tmap_c, smem.staging + math_wg * Staging::kBytes, kEpilogueBarrier0 + math_wg,
                                               warp_in_wg, lane_idx, total, w.n_block * BLOCK_N, wg_row_base);
            } else {
                store_fragments_direct<kOut, BLOCK_N>(total, out, ldc, row_limit, N, row0, col0);
            }
        }
        if constexpr (kTmaStore) {
            // NOTES: the last bulk store must have read the staging before the CTA's shared memory
            // goes away; its writes need not have landed (the grid's end orders them, as in
            // CUTLASS's epilogue tail), so the CTA retires without the global-write latency.
            if (threadIdx.x % kWarpgroupThreads == 0) tma_store_wait_read<0>();
        }
    }
#else
    // Built for another architecture: this kernel needs sm_90a (wgmma, setmaxnreg, TMA).
    asm volatile("trap;");
#endif
}

}  // namespace fp8gemm
