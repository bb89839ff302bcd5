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
// TMA out-of-bounds handling and masked in the epilogue.
//
// Structure: a persistent grid (at most one CTA per SM) walking work units = (tile, K split), see
// scheduler.cuh. A consumer warpgroup whose 64 rows all lie past M (or past its group's end, in
// a group of one token tile) only passes the stages on. 3 warpgroups per CTA:
//   warpgroup 0  producer: one thread issues the TMA loads of A and B into a kNumStages ring that
//                runs on across units, so the next unit's loads overlap this unit's epilogue;
//   warpgroups 1-2 consumers: each owns 64 rows of the 128 x BLOCK_N tile and runs wgmma on them.
// Swap-AB (kSwapAB, for M <= 64): the same mainloop computes C^T = B A^T, weight rows on wgmma's
// 64-row M side and tokens on its N side (BLOCK_N = 8..64), so no MMA row is wasted on padding;
// Bs becomes one scalar per tile and As a scale per column; the epilogue stores transposed.
// Grouped (kGrouped, MoE): A and C hold every group's rows, B is [G * N, K]; the groups come as
// device offsets [G + 1] or counts [G] (masked: group g owns rows g * group_rows ..), which every
// CTA scans into a shared-memory prefix of token tiles (scheduler.cuh); a tile never stores past
// its group's end. Plain, or swap-AB for decode (the group's tokens on the BLOCK_N side).
// Split-K (num_splits > 1, for small M): each split writes its FP32 partial tile to a workspace;
// the last split of a tile to finish (an atomic counter per tile) sums all partials in split order
// 0..S-1 and writes C, so the result is bitwise reproducible. It then resets the counter to 0, so
// the workspace needs zeroing only once.
// Fused SwiGLU (kSwiGLU, the MoE L1 of fp8gemm.moe, grouped and not swapped): B is [G * 2I, K] as
// gate rows then up rows; N is I. A tile's B stage holds 64 gate rows and the matching 64 up rows
// (two TMA boxes of 64 rows), each work unit covers 128 act columns as two such sub-tiles run
// back to back, and the epilogue writes SwiGLU(h) requantized to FP8 per 1 x 128 group with its
// scales (swiglu_epilogue.cuh) instead of h.
#include "common/types.cuh"
#include "common/pipeline.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/sync.cuh"
#include "ptx/tma.cuh"
#include "ptx/wgmma.cuh"
#include "epilogue.cuh"
#include "scheduler.cuh"
#include "swiglu_epilogue.cuh"

namespace fp8gemm {

namespace general {
constexpr uint32_t BLOCK_M = 128;                        // 2 consumer warpgroups x 64 rows
constexpr uint32_t BLOCK_K = 128;                        // one scale group; one 128B swizzle row
constexpr uint32_t kNumConsumerWarpgroups = BLOCK_M / kWgmmaM;
constexpr uint32_t kNumThreads = kWarpgroupThreads * (1 + kNumConsumerWarpgroups);
constexpr uint32_t kProducerRegs = 40;
constexpr uint32_t kConsumerRegs = 232;
// Named barrier ids (0 is __syncthreads).
enum Barrier : uint32_t {
    kConsumerBarrier = 1,
    kEpilogueBarrier0 = 2,   // + consumer warpgroup
    kOrderBarrier = 2 + kNumConsumerWarpgroups,
};
// NOTES: setmaxnreg moves registers inside the CTA's launch allocation (168 per thread: 65536 / 384
// rounded down to 8); a warpgroup's setmaxnreg.inc waits until the others' .dec have freed enough,
// so asking for more than the allocation hangs the CTA (seen with 48 / 232: bench/NOTES.md v7).
constexpr uint32_t kLaunchRegs = (65536 / kNumThreads) / 8 * 8;
static_assert(kProducerRegs * kWarpgroupThreads + kConsumerRegs * kWarpgroupThreads * kNumConsumerWarpgroups
                  <= kLaunchRegs * kNumThreads, "setmaxnreg would ask for more registers than the CTA holds");
static_assert(BLOCK_K == kSwizzleBytes && BLOCK_K == kScaleBlock, "one K block = one scale group = one swizzle row");
}  // namespace general

template <uint32_t BLOCK_N, uint32_t kNumStages, int kOutType, uint32_t kGroupM, bool kFinePromotion,
          bool kTmaStore, bool kSwapAB, bool kGrouped = false, bool kSwiGLU = false>
__global__ void __launch_bounds__(general::kNumThreads, 1)
sm90_fp8_gemm_general_kernel(const __grid_constant__ TmaDescriptor tmap_a,   // A [M, K], box {128, BLOCK_M}
                             const __grid_constant__ TmaDescriptor tmap_b,   // B [N, K], box {128, BLOCK_N}
                             const __grid_constant__ TmaDescriptor tmap_c,   // C [M, N], box {128 B, 64} (kTmaStore)
                             const float* __restrict__ a_scale, int64_t sa_stride_m, int64_t sa_stride_k,
                             const float* __restrict__ b_scale, int64_t sb_stride_n, int64_t sb_stride_k,
                             void* __restrict__ out, int64_t ldc,
                             uint32_t M, uint32_t N, uint32_t K,
                             uint32_t num_splits,                      // K splits per tile (1: none)
                             float* __restrict__ workspace,            // [tiles][splits][BLOCK_M*BLOCK_N] if split
                             uint32_t* __restrict__ tile_counters,     // [tiles], zero between launches
                             // kGrouped (MoE, scheduler.cuh): offsets [G + 1] (group_rows == 0) or
                             // counts [G] (masked: group g owns rows g * group_rows ..); B is [G * N, K]
                             // and Bs [G][ceil(N/128)][ceil(K/128)] with group stride sb_stride_g.
                             const int32_t* __restrict__ groups, uint32_t num_groups, uint32_t group_rows,
                             int64_t sb_stride_g,
                             // kSwiGLU: out is the FP8 act [M, N = I] (row pitch ldc bytes), these
                             // its scales [M, I / 128], and the clamp.
                             float* __restrict__ act_scale, float swiglu_limit) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using namespace general;
    constexpr OutType kOut = static_cast<OutType>(kOutType);
    using Mma = WgmmaFp8<BLOCK_N>;

    // ---- preconditions ------------------------------------------------------------------
    static_assert(BLOCK_N % 8 == 0 && BLOCK_N >= 8 && BLOCK_N <= 128, "wgmma N: 8..256 step 8; <=128 here");
    static_assert(kSwapAB || kScaleBlock % BLOCK_N == 0, "a tile must lie inside one 128-row block of Bs");
    static_assert(!(kSwapAB && kTmaStore), "swap-AB tiles are C^T: they store directly");
    static_assert(kNumStages >= 2, "need at least double buffering");
    static_assert(!kSwiGLU || (kGrouped && !kSwapAB && !kTmaStore && !kFinePromotion && BLOCK_N == 128),
                  "fused SwiGLU: grouped, not swapped, direct stores, coarse promotion, 64 gate + 64 up columns");
    constexpr uint32_t kSubTiles = kSwiGLU ? swiglu::kSubTiles : 1;   // sub-tiles per work unit

    // ---- shared memory: [A stages | B stages | C staging | SwiGLU hold | full bars | empty bars | flag | groups' tile prefix] ----
    using Staging = SwizzledStaging<kOut, BLOCK_N>;
    static_assert(!kTmaStore || Staging::kSupported, "TMA store needs BLOCK_N * sizeof(out) % 128 == 0");
    constexpr uint32_t SMEM_A_PER_STAGE = BLOCK_M * BLOCK_K;   // 16 KiB, 1 byte per FP8
    constexpr uint32_t SMEM_B_PER_STAGE = BLOCK_N * BLOCK_K;
    constexpr uint32_t SMEM_TILES = kNumStages * (SMEM_A_PER_STAGE + SMEM_B_PER_STAGE);
    constexpr uint32_t SMEM_C = kTmaStore ? kNumConsumerWarpgroups * Staging::kBytes : 0;
    // kSwiGLU: sub-tile 0's act values and its rows' amax, [warpgroup][value][thread] floats.
    constexpr uint32_t kHoldPerWarpgroup = kSwiGLU ? (Mma::kNumAccum / 2 + 2) * kWarpgroupThreads : 0;
    constexpr uint32_t SMEM_HOLD = kNumConsumerWarpgroups * kHoldPerWarpgroup * sizeof(float);
    constexpr uint32_t SMEM_BYTES = 1024 /* alignment slack */ + SMEM_TILES + SMEM_C + SMEM_HOLD +
                                    2 * kNumStages * sizeof(Mbarrier) + 16;
    static_assert(SMEM_A_PER_STAGE % 1024 == 0 && SMEM_B_PER_STAGE % 1024 == 0, "128B swizzle needs 1024 B alignment");
    static_assert(SMEM_BYTES <= kMaxSmemPerBlock, "shared memory over the SM90 limit");

    extern __shared__ uint8_t smem_raw[];
    // NOTES: aligned by an offset from smem_raw (not an integer cast), so the compiler keeps
    // knowing it is shared memory and stages the epilogue with STS, not generic stores.
    uint8_t* smem = smem_raw + (1024u - smem_addr(smem_raw) % 1024u) % 1024u;
    uint8_t* smem_a = smem;                                        // [kNumStages][BLOCK_M][128]
    uint8_t* smem_b = smem + kNumStages * SMEM_A_PER_STAGE;        // [kNumStages][BLOCK_N][128]
    uint8_t* smem_c = smem + SMEM_TILES;                           // [2 warpgroups][Staging]
    float* smem_hold = reinterpret_cast<float*>(smem + SMEM_TILES + SMEM_C);          // kSwiGLU
    Mbarrier* full_bar = reinterpret_cast<Mbarrier*>(smem + SMEM_TILES + SMEM_C + SMEM_HOLD);  // [kNumStages]
    Mbarrier* empty_bar = full_bar + kNumStages;                          // [kNumStages]
    volatile uint32_t* last_split_flag = reinterpret_cast<uint32_t*>(empty_bar + kNumStages);
    uint32_t* tile_prefix = reinterpret_cast<uint32_t*>(empty_bar + kNumStages) + 4;   // kGrouped: [G + 1]

    // Tile space: rows x cols of the product the wgmma computes. Swap-AB computes C^T = B A^T:
    // its rows are weight rows (N), its columns tokens (M); tmap_a then maps B and tmap_b maps A.
    const uint32_t ROWS = kSwapAB ? N : M;
    const uint32_t COLS = kSwapAB ? M : N;
    const uint32_t warp_idx = warp_idx_uniform();
    const uint32_t lane_idx = threadIdx.x % 32;
    const uint32_t warpgroup_idx = warp_idx / 4;

    // ---- barrier init: full <- 1 producer arrival (+ TMA bytes); empty <- one per consumer warp
    // NOTES: the producer is lane 0 of warp 1, not thread 0: outside the grouped mode (whose
    // scheduler needs the CTA's tile prefix first) it locates its first unit while thread 0 sets up
    // the ring, both already at the producer's register budget, so that the first TMA issues
    // right after the CTA sync. Before (bench/NOTES.md session 14, tools/trace_general.py) the
    // first TMA left ~1.1 us after kernel entry and the consumers waited ~2.2 us for their first
    // stage; the fixed time of a launch is most of what cuBLASLt gained on one- or two-wave shapes.
    constexpr uint32_t kProducerThread = 32;
    if (!kGrouped && warpgroup_idx == 0) setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0)
        init_tma_ring<kNumStages, kTmaStore>(&tmap_a, &tmap_b, &tmap_c, full_bar, empty_bar, kNumConsumerWarpgroups * 4);
    // Grouped: the groups' token tiles, BLOCK_M rows each (or BLOCK_N columns under swap-AB).
    constexpr uint32_t kTokenTile = kSwapAB ? BLOCK_N : BLOCK_M;
    if constexpr (kGrouped) group_tile_prefix<kTokenTile>(groups, num_groups, group_rows, M, tile_prefix);
    // Grouped: the token side of the tile space is every group's token tiles in group order
    // (prefix[G] of them). NOTES: each warpgroup builds the scheduler after its setmaxnreg; built
    // before, its values were spilled across the register reallocation (hence the producer's early
    // setmaxnreg below).
    const auto make_scheduler = [&]() {
        const uint32_t token_extent = kGrouped ? tile_prefix[num_groups] * kTokenTile : M;
        return TileScheduler<BLOCK_M, BLOCK_N, BLOCK_K, kGroupM>(kSwapAB ? N : token_extent,
                                                                 kSwapAB ? token_extent : N, K, num_splits);
    };
    // A unit's rows [row_base, row_end) and columns [col_base, col_end) inside C (C^T under swap-AB),
    // and its group. Grouped, the token side comes from the group holding the unit's token tile.
    const auto tile_span = [&](const WorkUnit& w) {
        TileSpan t{w.m_block * BLOCK_M, ROWS, w.n_block * BLOCK_N, COLS, 0u};
        if constexpr (kGrouped) {
            const TileRows g = locate_group_tile(kSwapAB ? w.n_block : w.m_block, groups, tile_prefix, num_groups,
                                                 group_rows, M, kTokenTile);
            if constexpr (kSwapAB) { t.col_base = g.row_base; t.col_end = g.row_end; }
            else { t.row_base = g.row_base; t.row_end = g.row_end; }
            t.group = g.group;
        }
        return t;
    };
    // Where the producer loads the tile's A-side box (128 rows of tmap_a) and how many rows the
    // consumers skip in it. NOTES: a box reaching past the map's last row is zero-filled by TMA, but
    // slowly: with 80 of 128 rows past the end the grouped GEMM took 1.5x as long (bench/NOTES.md
    // v12). Such a box is moved up by whole 8-row swizzle atoms (the 1024-byte alignment wgmma's
    // descriptors need) to end less than 8 rows past the map, when the map has rows above it; the
    // consumers start their descriptors that many rows in. Every row a tile stores stays inside
    // the box; the rows past it are past the map (never stored) and are read from what follows
    // the A stage in shared memory: at most kMaxBoxShift rows, so that reads of the last A stage
    // stay inside the B stages and the staging area (a 16-wide, 4-stage ring holds 64 rows' worth).
    constexpr uint32_t kMaxBoxShift = ((kNumStages * SMEM_B_PER_STAGE + SMEM_C) / BLOCK_K < 120u
                                           ? (kNumStages * SMEM_B_PER_STAGE + SMEM_C) / BLOCK_K : 120u) & ~7u;
    const uint32_t a_map_rows = kSwapAB ? (kGrouped ? num_groups * N : N) : M;
    const auto a_box = [&](const TileSpan& t, uint32_t& box_row, uint32_t& shift) {
        box_row = t.row_base + (kSwapAB ? t.group * N : 0u);
        shift = 0;
        if (box_row + BLOCK_M > a_map_rows) {
            const uint32_t over = min((box_row + BLOCK_M - a_map_rows) & ~7u, kMaxBoxShift);
            if (over <= box_row) { box_row -= over; shift = over; }
        }
    };

    // A unit's loads: its K range, where its A box starts, and the first row of its B box.
    struct UnitLoads { WorkUnit w; uint32_t a_row, b_row; };
    const auto unit_loads = [&](const TileScheduler<BLOCK_M, BLOCK_N, BLOCK_K, kGroupM>& sched, uint32_t u) {
        UnitLoads l;
        l.w = sched.unit(u);
        const TileSpan t = tile_span(l.w);
        uint32_t a_shift;
        a_box(t, l.a_row, a_shift);
        // Grouped: the weights are [G * N, K] (tmap_a under swap-AB, else tmap_b); fused SwiGLU:
        // [G * 2N, K], the sub-tile's 64 gate rows and 64 up rows N further.
        l.b_row = t.col_base + (kSwapAB ? 0u : t.group * N * (kSwiGLU ? 2u : 1u));
        return l;
    };

    TileScheduler<BLOCK_M, BLOCK_N, BLOCK_K, kGroupM> producer_sched;
    UnitLoads producer_first;
    // NOTES: not under split-K: there (swap-AB decode, ~5 us) the consumers' own set-up and scale
    // loads are the first stage's critical path, and holding them at the CTA sync while the
    // producer located its unit cost 2-6% (bench/NOTES.md session 14).
    const bool early_start = !kGrouped && num_splits == 1;
    producer_early_start<!kGrouped>(warp_idx == kProducerThread / 32 && early_start, producer_sched, producer_first,
                                    make_scheduler, unit_loads);
    __syncthreads();
    if (warpgroup_idx == 0) {
        // ================================ producer ================================
        if constexpr (kGrouped) setmaxnreg_dec<kProducerRegs>();
        if (threadIdx.x == kProducerThread) {
            if (!early_start) producer_sched = make_scheduler();
            const auto& sched = producer_sched;
            PipelineState<kNumStages> pipe;
            uint32_t loads = 0;                            // stages filled so far
            // The first unit's loads come from before the CTA sync (grouped, split: located here);
            // each next unit's are located after the previous unit's last load.
            UnitLoads l = producer_first;
            if (!early_start && blockIdx.x < sched.num_units) l = unit_loads(sched, blockIdx.x);
            for (uint32_t u = blockIdx.x; u < sched.num_units; u += gridDim.x) {
                if (u != blockIdx.x) l = unit_loads(sched, u);
                for (uint32_t sub = 0; sub < kSubTiles; ++sub) {
                    for (uint32_t kb = l.w.kb_begin; kb < l.w.kb_end; ++kb, ++pipe, ++loads) {
                        // The ring's first round needs no wait: every stage starts empty.
                        if (loads >= kNumStages) mbarrier_wait_parity(&empty_bar[pipe.stage], pipe.empty_parity());
                        Mbarrier* bar = &full_bar[pipe.stage];
                        mbarrier_arrive_expect_tx(bar, SMEM_A_PER_STAGE + SMEM_B_PER_STAGE);
                        tma_load_2d(smem_a + pipe.stage * SMEM_A_PER_STAGE, &tmap_a, bar, kb * BLOCK_K, l.a_row);
                        uint8_t* b_stage = smem_b + pipe.stage * SMEM_B_PER_STAGE;
                        if constexpr (kSwiGLU) {
                            const uint32_t gate_row = l.b_row + sub * swiglu::kActCols;
                            tma_load_2d(b_stage, &tmap_b, bar, kb * BLOCK_K, gate_row);
                            tma_load_2d(b_stage + swiglu::kActCols * BLOCK_K, &tmap_b, bar, kb * BLOCK_K, gate_row + N);
                        } else {
                            tma_load_2d(b_stage, &tmap_b, bar, kb * BLOCK_K, l.b_row);
                        }
                    }
                }
            }
        }
    } else {
        // ================================ consumers ===============================
        setmaxnreg_inc<kConsumerRegs>();
        const auto sched = make_scheduler();
        const uint32_t math_wg = warpgroup_idx - 1;      // which 64-row half of the tile
        const uint32_t warp_in_wg = warp_idx % 4;
        const uint32_t consumer_tid = threadIdx.x - kWarpgroupThreads;   // 0..255
        constexpr uint32_t kNumConsumerThreads = kNumConsumerWarpgroups * kWarpgroupThreads;
        // NOTES: in the lean two-accumulator loop (not swapped, coarse promotion) the two
        // warpgroups pass named barrier kOrderBarrier around each K block's wgmma issue, warpgroup 0
        // before issuing and warpgroup 1 after, so their blocks reach the tensor cores in a fixed
        // alternation (cuBLASLt's kernel does the same: ncu source counters, bench/NOTES.md session
        // 14). Measured 1-3% faster at large M. A warpgroup that skips a tile passes it too.
        constexpr bool kOrderedIssue = !kSwapAB && !kFinePromotion;
        // Accumulator rows of this thread inside the tile: r and r + 8 (see ptx/wgmma_fp8.cuh).
        const uint32_t row_in_tile = math_wg * kWgmmaM + warp_in_wg * 16 + lane_idx / 4;

        float accum[Mma::kNumAccum];   // one promotion group of this warpgroup's 64 x BLOCK_N
        float total[Mma::kNumAccum];   // running FP32 sum after scale promotion
        PipelineState<kNumStages> pipe;

        // Passes: each work unit's kSubTiles sub-tiles in turn (one, unless kSwiGLU), then this
        // CTA's next unit gridDim.x further on.
        for (uint32_t pass = blockIdx.x * kSubTiles; pass < sched.num_units * kSubTiles;
             pass += (pass % kSubTiles + 1 == kSubTiles) ? (gridDim.x - 1) * kSubTiles + 1 : 1) {
            const uint32_t u = pass / kSubTiles;
            const uint32_t sub = pass % kSubTiles;
            const WorkUnit w = sched.unit(u);
            const TileSpan t = tile_span(w);
            uint32_t a_row, a_shift;
            a_box(t, a_row, a_shift);
            // The rows (tokens) this tile may store: M, or (grouped) the end of its group, whose
            // next rows belong to another group's tile. Swap-AB: the same for its columns.
            const uint32_t row_limit = kSwapAB ? M : t.row_end;
            // A warpgroup whose 64 rows all lie past the rows the tile may store (an M tail, or a
            // group of <= 64 rows) has nothing to compute or store: no wgmma, no promotion, no
            // epilogue. It still takes each stage in turn and hands it back (the empty barrier
            // counts its warps). Not under split-K, whose epilogue synchronizes both warpgroups.
            // Grouped, only in a group of one token tile. NOTES: the last tile of a group of two or
            // more then ran faster than its sibling tiles, which read the same B tiles and share
            // them in L2 only while they run in step: the MoE L1 at 8192 tokens (192 rows per
            // expert) read 9.7 GB from DRAM instead of 6.5 and took 24% longer (bench/NOTES.md,
            // session 8); groups of one tile have no sibling (48 rows per expert: 6% faster).
            const bool lone_tile = !kGrouped || tile_prefix[t.group + 1] - tile_prefix[t.group] == 1;
            if (!kSwapAB && num_splits == 1 && lone_tile && t.row_base + math_wg * kWgmmaM >= row_limit) {
                for (uint32_t kb = w.kb_begin; kb < w.kb_end; ++kb, ++pipe) {
                    mbarrier_wait_parity(&full_bar[pipe.stage], pipe.full_parity());
                    __syncwarp();
                    if (lane_idx == 0) mbarrier_arrive(&empty_bar[pipe.stage]);
                    // The other warpgroup's K loop passes the order barrier once per block.
                    if constexpr (kOrderedIssue) named_barrier_sync(kOrderBarrier, kNumConsumerThreads);
                }
                continue;
            }
            const uint32_t col_limit = t.col_end;
            const uint32_t row0 = t.row_base + row_in_tile;
            const uint32_t row1 = row0 + 8;
            // Scale reads clamp to a valid token: tokens past the limit are never stored (past M
            // they are zero in A). Non-swapped: As per tile row, one Bs per tile. Swapped: one Bs
            // per tile (BLOCK_M = 128 weight rows = one Bs block), As per tile column.
            const float* sa_row0 = a_scale + static_cast<int64_t>(min(row0, row_limit - 1)) * sa_stride_m;
            const float* sa_row1 = a_scale + static_cast<int64_t>(min(row1, row_limit - 1)) * sa_stride_m;
            const uint32_t sb_block = kSwapAB ? w.m_block : w.n_block * BLOCK_N / kScaleBlock;
            const float* sb_row = b_scale + static_cast<int64_t>(sb_block) * sb_stride_n +
                                  (kGrouped ? static_cast<int64_t>(t.group) * sb_stride_g : 0);
            const uint32_t col0 = t.col_base + 2 * (lane_idx % 4);   // this thread's first column
#pragma unroll
            for (int i = 0; i < Mma::kNumAccum; ++i) total[i] = 0.0f;

            if (!kSwapAB && w.kb_begin == w.kb_end) {
                // An empty K split (splits > K blocks): its partial is zero; touch no scale.
            } else if constexpr (!kSwapAB) {
                // Lean loop for the tile rows = tokens case (every M > 64): the K loop is issue-bound
                // at large M, so per K block it runs 4 wgmma, 3 scale loads, 2 FMUL and the
                // promotion FFMAs, and little else. Scale pointers advance by one K block per
                // iteration and the next block's scales are loaded one iteration ahead; descriptors
                // move by 32-bit adds (bench/NOTES.md v8).
                const float* pa0 = sa_row0 + static_cast<int64_t>(w.kb_begin) * sa_stride_k;
                const float* pa1 = sa_row1 + static_cast<int64_t>(w.kb_begin) * sa_stride_k;
                const float* pb = sb_row + static_cast<int64_t>(w.kb_begin) * sb_stride_k;
                // kSwiGLU: the up rows' scales sit N / 128 scale blocks after the gate rows' (an
                // offset from kernel parameters, recomputed per load: no loop-carried pointer).
                const auto up_scale = [&](const float* gate) {
                    return gate[static_cast<int64_t>(N / kScaleBlock) * sb_stride_n];
                };
                float a0 = *pa0, a1 = *pa1, b0 = *pb;                // this block's raw scales
                const uint32_t lo_a0 = smem_desc_k128b_lo(smem_a + (math_wg * kWgmmaM + a_shift) * BLOCK_K);
                const uint32_t lo_b0 = smem_desc_k128b_lo(smem_b);
                constexpr bool kDoubleAccum = !kFinePromotion;   // fine promotion: 4 groups per block
                if constexpr (kDoubleAccum) {
                    // Two accumulators in turn: block kb's wgmma run into one while the other's
                    // block kb-1 is promoted; nothing is in flight across the loop's back edge.
                    float acc2[Mma::kNumAccum];
                    float pa0v = 0.0f, pa1v = 0.0f, pbv = 0.0f, pbvu = 0.0f;   // raw scales of the pending block
                    const auto issue = [&](float (&acc)[Mma::kNumAccum]) {
                        const uint32_t stage = __shfl_sync(0xffffffffu, pipe.stage, 0);
                        mbarrier_wait_parity(&full_bar[stage], pipe.full_parity());
                        const uint32_t lo_a = lo_a0 + stage * (SMEM_A_PER_STAGE >> 4);
                        const uint32_t lo_b = lo_b0 + stage * (SMEM_B_PER_STAGE >> 4);
                        if (math_wg == 0) named_barrier_sync(kOrderBarrier, kNumConsumerThreads);
                        wgmma_fence_operands(acc);
                        wgmma_fence();
#pragma unroll
                        for (uint32_t k = 0; k < BLOCK_K / kWgmmaKFp8; ++k) {
                            const uint32_t kstep = (k * kWgmmaKFp8) >> 4;
                            Mma::mma(smem_desc_from_lo(lo_a + kstep), smem_desc_from_lo(lo_b + kstep), acc, k > 0 ? 1u : 0u);
                        }
                        wgmma_commit_group();
                        if (math_wg == 1) named_barrier_sync(kOrderBarrier, kNumConsumerThreads);
                        return stage;
                    };
                    const auto finish = [&](float (&acc)[Mma::kNumAccum], uint32_t stage) {
                        wgmma_wait<0>();
                        wgmma_fence_operands(acc);
                        __syncwarp();
                        if (lane_idx == 0) mbarrier_arrive(&empty_bar[stage]);
                        ++pipe;
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
                    const auto take_scales = [&](uint32_t kb) {
                        pa0v = a0; pa1v = a1; pbv = b0;
                        // kSwiGLU: the up rows' scale is loaded here, not a block ahead (one
                        // register fewer across the loop; it is used after the next block's issue).
                        if constexpr (kSwiGLU) pbvu = up_scale(pb);
                        const int64_t step = kb + 1 < w.kb_end ? 1 : 0;
                        pa0 += step * sa_stride_k;
                        pa1 += step * sa_stride_k;
                        pb += step * sb_stride_k;
                        a0 = *pa0; a1 = *pa1; b0 = *pb;

                    };
                    uint32_t kb = w.kb_begin;
                    finish(accum, issue(accum));
                    take_scales(kb);
                    ++kb;
                    // NOTES: the loop's two halves mirror each other with the accumulators' roles
                    // swapped, so that each array keeps fixed registers (no copies, no dynamic index).
                    while (true) {
                        if (kb == w.kb_end) { promote(accum); break; }
                        {
                            const uint32_t st = issue(acc2);
                            promote(accum);
                            take_scales(kb);
                            finish(acc2, st);
                        }
                        ++kb;
                        if (kb == w.kb_end) { promote(acc2); break; }
                        {
                            const uint32_t st = issue(accum);
                            promote(acc2);
                            take_scales(kb);
                            finish(accum, st);
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
                    mbarrier_wait_parity(&full_bar[stage], pipe.full_parity());
                    const uint32_t lo_a = lo_a0 + stage * (SMEM_A_PER_STAGE >> 4);
                    const uint32_t lo_b = lo_b0 + stage * (SMEM_B_PER_STAGE >> 4);
                    constexpr uint32_t kMmasPerBlock = BLOCK_K / kWgmmaKFp8;
                    constexpr uint32_t kMmasPerGroup = kFinePromotion ? 1 : kMmasPerBlock;
                    const float s0 = a0 * b0, s1 = a1 * b0;
#pragma unroll
                    for (uint32_t k0 = 0; k0 < kMmasPerBlock; k0 += kMmasPerGroup) {
                        wgmma_fence_operands(accum);
                        wgmma_fence();
#pragma unroll
                        for (uint32_t k = k0; k < k0 + kMmasPerGroup; ++k) {
                            const uint32_t kstep = (k * kWgmmaKFp8) >> 4;
                            Mma::mma(smem_desc_from_lo(lo_a + kstep), smem_desc_from_lo(lo_b + kstep), accum,
                                     k > k0 ? 1u : 0u);
                        }
                        wgmma_commit_group();
                        wgmma_wait<0>();
                        wgmma_fence_operands(accum);
                        if (k0 + kMmasPerGroup == kMmasPerBlock) {
                            __syncwarp();
                            if (lane_idx == 0) mbarrier_arrive(&empty_bar[stage]);
                        }
#pragma unroll
                        for (int i = 0; i < Mma::kNumAccum; ++i) total[i] += accum[i] * (((i >> 1) & 1) ? s1 : s0);
                    }
                    a0 = na0;
                    a1 = na1;
                    b0 = nb0;
                }
                }
            } else
            for (uint32_t kb = w.kb_begin; kb < w.kb_end; ++kb, ++pipe) {
                // Scale loads first: their latency hides under the wait and the wgmma.
                const float sb = sb_row[kb * sb_stride_k];
                float s0 = 0.0f, s1 = 0.0f;                      // per row (non-swapped)
                float s_col[kSwapAB ? BLOCK_N / 4 : 1];          // per column (swapped): [j][e]
                if constexpr (!kSwapAB) {
                    s0 = sa_row0[kb * sa_stride_k] * sb;
                    s1 = sa_row1[kb * sa_stride_k] * sb;
                } else {
#pragma unroll
                    for (uint32_t q = 0; q < BLOCK_N / 4; ++q) {
                        const uint32_t token = min(col0 + 8 * (q / 2) + (q % 2), col_limit - 1);
                        s_col[q] = a_scale[static_cast<int64_t>(token) * sa_stride_m + kb * sa_stride_k] * sb;
                    }
                }

                mbarrier_wait_parity(&full_bar[pipe.stage], pipe.full_parity());
                const uint8_t* a_tile = smem_a + pipe.stage * SMEM_A_PER_STAGE + (math_wg * kWgmmaM + a_shift) * BLOCK_K;
                const uint8_t* b_tile = smem_b + pipe.stage * SMEM_B_PER_STAGE;
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
                        if (lane_idx == 0) mbarrier_arrive(&empty_bar[pipe.stage]);
                    }

                    // Promotion: total += accum * As[token, kb] * Bs[weight block, kb]. Accumulator i
                    // is (row half h = (i >> 1) & 1, column pair j = i / 4, element e = i % 2).
#pragma unroll
                    for (int i = 0; i < Mma::kNumAccum; ++i) {
                        if constexpr (kSwapAB)
                            total[i] += accum[i] * s_col[(i / 4) * 2 + (i % 2)];
                        else
                            total[i] += accum[i] * (((i >> 1) & 1) ? s1 : s0);
                    }
                }
            }

            // ---- split-K: publish this split's partial; the last split of the tile reduces ----
            if (!kSwiGLU && num_splits > 1) {
                // Workspace layout [tile][split][j][consumer thread][4]: coalesced float4 per j.
                constexpr uint32_t kTileFloats = BLOCK_M * BLOCK_N;
                float* tile_ws = workspace + static_cast<int64_t>(w.tile_idx) * num_splits * kTileFloats;
                float* mine = tile_ws + static_cast<int64_t>(w.split_idx) * kTileFloats;
                // NOTES: a thread whose values are all past the tile's rows (past N under swap-AB)
                // or, swapped, past its tokens (col0 is its first column) holds nothing that is ever
                // stored: it skips the workspace entirely (swap-AB at M = 1: 64 of 256 threads).
                const bool has_rows = row0 < ROWS && (!kSwapAB || col0 < col_limit);
                if (has_rows) {
#pragma unroll
                    for (int j = 0; j < Mma::kNumAccum / 4; ++j) {
                        const float v[4] = {total[4 * j], total[4 * j + 1], total[4 * j + 2], total[4 * j + 3]};
                        st_cg_f32x4(mine + (j * kNumConsumerThreads + consumer_tid) * 4, v);
                    }
                }
                // NOTES: no per-thread fence. The barrier orders every consumer thread's stores before
                // thread 0's acq_rel add (a release is cumulative), and the next barrier orders that
                // add's acquire before every thread's loads of the other partials (the pattern of
                // CUTLASS's split-K semaphore). The two __threadfence() it replaces cost ~0.5 us of
                // a 5 us decode GEMM (bench/NOTES.md session 9).
                named_barrier_sync(kConsumerBarrier, kNumConsumerThreads);
                if (consumer_tid == 0) {
                    const uint32_t done = atomic_add_acq_rel_gpu(&tile_counters[w.tile_idx], 1u);
                    const uint32_t last = (done == num_splits - 1) ? 1u : 0u;
                    if (last) tile_counters[w.tile_idx] = 0;        // ready for the next launch
                    *last_split_flag = last;
                }
                named_barrier_sync(kConsumerBarrier, kNumConsumerThreads);
                if (*last_split_flag == 0) continue;              // another split finishes the tile
#pragma unroll
                for (int i = 0; i < Mma::kNumAccum; ++i) total[i] = 0.0f;
                // The splits' partials in chunks of kChunk: every (predicated) load of a chunk is
                // issued before its adds, so one L2 round trip serves kChunk splits (a small tile's
                // reduction is latency-bound: bench/NOTES.md session 9); the adds stay in split
                // order 0..S-1, so the sum is deterministic.
                const float4* part = reinterpret_cast<const float4*>(tile_ws) + consumer_tid;
                constexpr uint32_t kFloat4PerSplit = kTileFloats / 4;
                constexpr uint32_t kF4 = Mma::kNumAccum / 4;       // float4 per thread per split
                constexpr uint32_t kChunk = kF4 >= 16 ? 1 : 16 / kF4;   // 16 float4 in flight
                for (uint32_t s0 = 0; has_rows && s0 < num_splits; s0 += kChunk) {
                    float4 v[kChunk][kF4];
#pragma unroll
                    for (uint32_t c = 0; c < kChunk; ++c) {
#pragma unroll
                        for (uint32_t j = 0; j < kF4; ++j)
                            v[c][j] = s0 + c < num_splits ? __ldcg(part + (s0 + c) * kFloat4PerSplit + j * kNumConsumerThreads)
                                                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                    }
#pragma unroll
                    for (uint32_t c = 0; c < kChunk; ++c) {
                        if (s0 + c >= num_splits) break;
#pragma unroll
                        for (uint32_t j = 0; j < kF4; ++j) {
                            total[4 * j] += v[c][j].x;
                            total[4 * j + 1] += v[c][j].y;
                            total[4 * j + 2] += v[c][j].z;
                            total[4 * j + 3] += v[c][j].w;
                        }
                    }
                }
            }

            // ---- epilogue ----------------------------------------------------------------------
            const uint32_t wg_row_base = t.row_base + math_wg * kWgmmaM;
            if constexpr (kSwiGLU) {
                // Act columns 128 * n_block + 64 * sub ..; the unit's group of 128 is n_block.
                swiglu_quant_epilogue(total, sub, smem_hold + math_wg * kHoldPerWarpgroup, threadIdx.x % kWarpgroupThreads,
                                      swiglu_limit, static_cast<uint8_t*>(out), ldc, act_scale,
                                      N / kScaleBlock, w.n_block, row0, row_limit, col0);
            } else if constexpr (kSwapAB) {
                store_fragments_transposed<kOut, BLOCK_N>(total, out, ldc, col_limit, N, row0, col0);
            } else if (kTmaStore && kGrouped && wg_row_base < row_limit && wg_row_base + kWgmmaM > row_limit) {
                // A warpgroup across its group's end: TMA would clip only at M, so mask the rows.
                store_fragments_direct<kOut, BLOCK_N>(total, out, ldc, row_limit, N, row0, col0);
            } else if constexpr (kTmaStore) {
                // Stage through swizzled shared memory, then one bulk store per 128-byte chunk.
                if (wg_row_base < row_limit) {             // a warpgroup wholly past M has nothing
                    uint8_t* stage = smem_c + math_wg * Staging::kBytes;
                    const bool leader = threadIdx.x % kWarpgroupThreads == 0;
                    if (leader) tma_store_wait_read<0>();  // the previous tile's store has read it
                    named_barrier_sync(kEpilogueBarrier0 + math_wg, kWarpgroupThreads);
                    Staging::write_fragments(stage, warp_in_wg, lane_idx, total);
                    fence_proxy_async_shared();            // generic-proxy writes -> TMA reads
                    named_barrier_sync(kEpilogueBarrier0 + math_wg, kWarpgroupThreads);
                    if (leader) {
                        Staging::store(&tmap_c, stage, w.n_block * BLOCK_N, wg_row_base);
                    }
                }
            } else {
                store_fragments_direct<kOut, BLOCK_N>(total, out, ldc, row_limit, N, row0, col0);
            }
        }
        if constexpr (kTmaStore) {
            if (threadIdx.x % kWarpgroupThreads == 0) tma_store_wait<0>();   // before smem goes away
        }
    }
#else
    // Built for another architecture: this kernel needs sm_90a (wgmma, setmaxnreg, TMA).
    asm volatile("trap;");
#endif
}

}  // namespace fp8gemm
