// general_tiles.cuh: what the general kernel (sm90_fp8_gemm_general.cu: tokens on wgmma's 64-row
// M side) and the swap-AB kernel (sm90_fp8_gemm_swap_ab.cu: weight rows there) share: the CTA's
// warpgroups and register split, the shared-memory layout, the tile space and where a work unit's
// TMA boxes start (plain or grouped), and the producer's loop.
//
// A CTA has 1 + kConsumers warpgroups (general::Cta):
//   warpgroup 0  producer: one thread issues the TMA loads of A and B into a kNumStages ring that
//                runs on across work units, so the next unit's loads overlap this unit's epilogue;
//   warpgroups 1.. consumers: each owns 64 rows of the 64 * kConsumers x BLOCK_N tile and runs
//                wgmma on them (two: the two kernels' default; one: their 64-row tiles).
// The tile space is rows x columns of the product the wgmma computes: C (M x N), or C^T (N x M)
// under swap-AB, where tmap_a maps B and tmap_b maps A.
// Grouped (kGrouped, MoE): A and C hold every group's rows, B is [G * N, K]; the groups come as
// device offsets [G + 1] or counts [G] (masked: group g owns rows g * group_rows ..), which every
// CTA scans into a shared-memory prefix of token tiles (scheduler.cuh). The token side of the tile
// space is then every group's token tiles in group order, and a tile never stores past its
// group's end.
#pragma once
#include "common/types.cuh"
#include "common/pipeline.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/sync.cuh"
#include "ptx/tma.cuh"
#include "scheduler.cuh"
#include "swiglu_epilogue.cuh"

namespace fp8gemm {

namespace general {
constexpr uint32_t BLOCK_K = 128;                        // one scale group; one 128B swizzle row
constexpr uint32_t kProducerRegs = 40;
constexpr uint32_t kConsumerRegs = 232;
// NOTES: the producer is lane 0 of warp 1, not thread 0: outside the grouped mode (whose scheduler
// needs the CTA's tile prefix first) it locates its first unit while thread 0 sets up the ring,
// both already at the producer's register budget, so that the first TMA issues right after the
// CTA sync. Before, the first TMA left ~1.1 us after kernel entry and the consumers waited ~2.2 us
// for their first stage; the fixed time of a launch is most of what cuBLASLt gained on one- or
// two-wave shapes (bench/NOTES.md, "launch latency of the general kernel").
constexpr uint32_t kProducerThread = 32;

/// The family's CTA with kConsumers consumer warpgroups of 64 rows each (2: 128-row tiles; 1:
/// 64-row tiles: the general kernel's for few tokens, which leave no warpgroup idle and fit twice
/// the stages; swap-AB's for twice the weight tiles without a K split).
template <uint32_t kConsumers>
struct Cta {
    static_assert(kConsumers == 1 || kConsumers == 2, "one or two consumer warpgroups");
    static constexpr uint32_t BLOCK_M = kConsumers * kWgmmaM;
    static constexpr uint32_t kConsumerWarpgroups = kConsumers;
    static constexpr uint32_t kConsumerThreads = kConsumers * kWarpgroupThreads;
    static constexpr uint32_t kThreads = kWarpgroupThreads * (1 + kConsumers);
    // Named barrier ids (0 is __syncthreads): split-K's over the consumers, each consumer
    // warpgroup's TMA-store staging, and the two consumers' issue order.
    static constexpr uint32_t kConsumerBarrier = 1;
    static constexpr uint32_t kEpilogueBarrier0 = 2;
    static constexpr uint32_t kOrderBarrier = 2 + kConsumers;
    // NOTES: setmaxnreg moves registers inside the CTA's launch allocation (168 per thread with 384
    // threads: 65536 / 384 rounded down to 8); a warpgroup's setmaxnreg.inc waits until the others'
    // .dec have freed enough, so asking for more than the allocation hangs the CTA (seen with
    // 48 / 232: bench/NOTES.md).
    static constexpr uint32_t kLaunchRegs = (65536 / kThreads) / 8 * 8;
    static_assert(kProducerRegs * kWarpgroupThreads + kConsumerRegs * kConsumerThreads <= kLaunchRegs * kThreads,
                  "setmaxnreg would ask for more registers than the CTA holds");
};

// The two-consumer CTA's names (the two kernels' default).
using Cta2 = Cta<2>;
constexpr uint32_t BLOCK_M = Cta2::BLOCK_M;
constexpr uint32_t kNumConsumerWarpgroups = Cta2::kConsumerWarpgroups;
constexpr uint32_t kNumConsumerThreads = Cta2::kConsumerThreads;
constexpr uint32_t kNumThreads = Cta2::kThreads;
enum Barrier : uint32_t {
    kConsumerBarrier = Cta2::kConsumerBarrier,
    kEpilogueBarrier0 = Cta2::kEpilogueBarrier0,   // + consumer warpgroup
    kOrderBarrier = Cta2::kOrderBarrier,
};
static_assert(BLOCK_K == kSwizzleBytes && BLOCK_K == kScaleBlock, "one K block = one scale group = one swizzle row");

/// Where the plain GEMM's consumers read the scales (the general kernel's kScaleTma, a mask):
/// from global memory (kScaleLoads), or from slots of each ring stage that the producer fills by
/// TMA on the stage's full barrier: kScaleSlotsA, an M-major As (box {BLOCK_M rows, 1 K block},
/// one contiguous row of As; slot [row]); kScaleSlotsB, a K-major Bs (box {4 K blocks, the
/// tile's one Bs row}, 16 bytes; slot [4], the stage's block at kb % 4). NOTES: a K-major As
/// would need a box of 16 bytes from each of the BLOCK_M rows, and TMA pays per row: such slots
/// ran 0.55-0.8x the loads' speed on small tiles (bench/NOTES.md), so a K-major As keeps the
/// loads. Layout in the hold: the A slots [kNumStages][BLOCK_M], then the B slots
/// [kNumStages][kBSlotFloats] (16 bytes used of 128: a TMA destination is 128-byte aligned).
/// kScaleCopy, with both slot bits: the slots are filled not by TMA but by the producer warp's
/// cp.async from As and Bs of any layout (produce_units), a float per tile row and stage.
/// NOTES: the consumers' own loads of the next block's scales, waited on inside the next block's
/// wgmma issue, cost 5-15% at mid M (the kernel with no scale loads), yet these copies ran slower
/// than those loads on 22 of 24 mid-M tiles, so they run only when forced (bench/NOTES.md).
/// kScaleWindow (alone): a K-major As and Bs whose rows are 16-byte aligned come by TMA once per
/// 32 K blocks of a unit, not once per stage: a window of the tile's As rows x 32 K blocks (128
/// bytes of each row, one box {32, kRows}, 128B-swizzled so that the 8 rows a warp reads at one K
/// block lie in 8 different bank groups) and the tile's Bs row x 32 K blocks (box {32, 1}), two
/// windows in turn (ScaleWindows). NOTES: a warp's loads of a K-major As touch one cache line
/// per tile row it holds (16, and the Bs line) at every K block; the window's TMA reads each line
/// once per 32 blocks, and the consumers' shared-memory reads are conflict-free. Measured 1-5%
/// faster than the loads on 128-row tiles, as fast or slower on 64-row tiles with shallow rings
/// (the dispatcher's windows_win, bench/NOTES.md).
// kScaleLoadsInBlock: the consumers' loads as kScaleLoads, each K block's in its own half of the
// loop (units of at most 8 K blocks, see the kernel's kLoadsInBlock).
enum ScaleSource : int {
    kScaleLoads = 0, kScaleSlotsA = 1, kScaleSlotsB = 2, kScaleCopy = 4, kScaleWindow = 8, kScaleLoadsInBlock = 16
};
constexpr uint32_t kScaleCopyArrivals = 32;        // the producer warp's lanes' arrivals on each full barrier
constexpr uint32_t kBSlotFloats = 32;
template <int kScaleTma, uint32_t kRows>
__host__ __device__ constexpr uint32_t scale_slot_floats() {
    return ((kScaleTma & kScaleSlotsA) ? kRows : 0u) + ((kScaleTma & kScaleSlotsB) ? kBSlotFloats : 0u);
}

/// kScaleWindow's two windows in the hold (1024-byte aligned): As [2][kRows][32] floats, each
/// 128-byte row's 16-byte chunks swizzled by the row (TMA's 128B swizzle), then Bs [2][32], then
/// each window's full barrier (the producer's arrival and the boxes' bytes) and empty barrier
/// (one arrival per consumer warp, after its reads of the window's last K block).
template <uint32_t kRows>
struct ScaleWindows {
    static constexpr uint32_t kBlocks = 32;                      // K blocks per window: 128 B of a row
    static constexpr uint32_t kABytes = kRows * kBlocks * 4u;
    static constexpr uint32_t kBytes = 2 * kABytes + 2 * kBlocks * 4u + 256u;   // + barriers, padded
    static constexpr uint32_t kTxBytes = kABytes + kBlocks * 4u;
    float* base;
    __device__ __forceinline__ float* a(uint32_t w) const { return base + w * (kABytes / 4); }
    __device__ __forceinline__ float* b(uint32_t w) const { return base + 2 * (kABytes / 4) + w * kBlocks; }
    __device__ __forceinline__ Mbarrier* full(uint32_t w) const {
        return reinterpret_cast<Mbarrier*>(base + 2 * (kABytes / 4) + 2 * kBlocks) + w;
    }
    __device__ __forceinline__ Mbarrier* empty(uint32_t w) const { return full(2) + w; }
};

/// The family's shared memory (common/pipeline.cuh's RingSmem): 64 * kConsumers-row A stages,
/// BLOCK_N-row B stages, the TMA-store staging of each consumer warpgroup, the fused SwiGLU's
/// hold, 16 bytes of flags (the split-K last-split flag) and, grouped, the tile prefix [G + 1]
/// after them.
template <uint32_t BLOCK_N, uint32_t kNumStages, uint32_t kStagingBytes, uint32_t kHoldBytes = 0,
          uint32_t kConsumers = 2>
using Smem = RingSmem<Cta<kConsumers>::BLOCK_M * BLOCK_K, BLOCK_N * BLOCK_K, kNumStages, kConsumers * kStagingBytes,
                      kConsumers * kHoldBytes, 16>;
}  // namespace general

/// Where kScaleCopy's copies come from: As and Bs as the kernel gets them (any strides).
struct ScaleCopySrc {
    const float* a_scale = nullptr;
    int64_t sa_stride_m = 0, sa_stride_k = 0;
    const float* b_scale = nullptr;
    int64_t sb_stride_n = 0, sb_stride_k = 0;
};

/// A work unit's loads: its K range, where its A box starts, the first row of its B box, its
/// first tile row (the As box of kScaleSlotsA) and its Bs row (kScaleSlotsB).
struct UnitLoads {
    WorkUnit w;
    uint32_t a_row, b_row, s_row, sb_row;
};

/// The tile space of one launch and where each work unit's boxes lie. ``kMaxBoxShift``: how many
/// rows past its A stage a consumer may read (see a_box).
template <uint32_t BLOCK_N, uint32_t kGroupM, bool kSwapAB, bool kGrouped, bool kSwiGLU, uint32_t kMaxBoxShift,
          uint32_t kBlockM = general::BLOCK_M>
struct GeneralTiles {
    static constexpr uint32_t kRows = kBlockM;                     // tile rows: 64 per consumer warpgroup
    static constexpr uint32_t kConsumerWarps = kBlockM / kWgmmaM * 4;
    using Scheduler = TileScheduler<kBlockM, BLOCK_N, general::BLOCK_K, kGroupM>;
    // Grouped: the groups' token tiles, kBlockM rows each (or BLOCK_N columns under swap-AB).
    static constexpr uint32_t kTokenTile = kSwapAB ? BLOCK_N : kBlockM;

    uint32_t M, N, K, num_splits;
    const int32_t* groups;
    const uint32_t* tile_prefix;
    uint32_t num_groups, group_rows;

    /// NOTES: each warpgroup builds the scheduler after its setmaxnreg; built before, its values
    /// were spilled across the register reallocation (hence the grouped producer's setmaxnreg
    /// before it builds one).
    __device__ __forceinline__ Scheduler scheduler() const {
        const uint32_t token_extent = kGrouped ? tile_prefix[num_groups] * kTokenTile : M;
        return Scheduler(kSwapAB ? N : token_extent, kSwapAB ? token_extent : N, K, num_splits);
    }

    /// A unit's rows [row_base, row_end) and columns [col_base, col_end) inside C (C^T under
    /// swap-AB), and its group. Grouped, the token side comes from the group holding the unit's
    /// token tile.
    __device__ __forceinline__ TileSpan span(const WorkUnit& w) const {
        TileSpan t{w.m_block * kBlockM, kSwapAB ? N : M, w.n_block * BLOCK_N, kSwapAB ? M : N, 0u};
        if constexpr (kGrouped) {
            const TileRows g = locate_group_tile(kSwapAB ? w.n_block : w.m_block, groups, tile_prefix, num_groups,
                                                 group_rows, M, kTokenTile);
            if constexpr (kSwapAB) { t.col_base = g.row_base; t.col_end = g.row_end; }
            else { t.row_base = g.row_base; t.row_end = g.row_end; }
            t.group = g.group;
        }
        return t;
    }

    /// Where the producer loads the tile's A-side box (kBlockM rows of tmap_a) and how many rows the
    /// consumers skip in it: a box reaching past the map's last row moves up (box_shift_rows, which
    /// says why) and the consumers start their descriptors that many rows in. Every row a tile
    /// stores stays inside the box; the rows past it are past the map (never stored) and are read
    /// from what follows the A stage in shared memory: at most kMaxBoxShift rows, so that reads of
    /// the last A stage stay inside the B stages and the staging area.
    __device__ __forceinline__ void a_box(const TileSpan& t, uint32_t& box_row, uint32_t& shift) const {
        const uint32_t a_map_rows = kSwapAB ? (kGrouped ? num_groups * N : N) : M;
        box_row = t.row_base + (kSwapAB ? t.group * N : 0u);
        shift = box_shift_rows<kBlockM, kMaxBoxShift>(box_row, a_map_rows);
        box_row -= shift;
    }

    __device__ __forceinline__ UnitLoads loads(const Scheduler& sched, uint32_t u) const {
        UnitLoads l;
        l.w = sched.unit(u);
        const TileSpan t = span(l.w);
        uint32_t a_shift;
        a_box(t, l.a_row, a_shift);
        l.s_row = t.row_base;
        l.sb_row = t.col_base / kScaleBlock;
        // Grouped: the weights are [G * N, K] (tmap_a under swap-AB, else tmap_b); fused SwiGLU:
        // [G * 2N, K], the sub-tile's 64 gate rows and 64 up rows N further.
        l.b_row = t.col_base + (kSwapAB ? 0u : t.group * N * (kSwiGLU ? 2u : 1u));
        return l;
    }
};

/// How many rows past its A stage a consumer of the family may read (GeneralTiles::a_box): what
/// follows the last A stage (the B stages and the staging area), at most 120, in whole 8-row atoms.
template <uint32_t kNumStages, uint32_t kBStageBytes, uint32_t kStagingBytes>
__host__ __device__ constexpr uint32_t general_max_box_shift() {
    return ((kNumStages * kBStageBytes + kStagingBytes) / general::BLOCK_K < 120u
                ? (kNumStages * kBStageBytes + kStagingBytes) / general::BLOCK_K : 120u) & ~7u;
}

/// The producer thread's loop: every unit of this CTA (blockIdx.x, then gridDim.x further on),
/// kSubTiles passes over its K range each (two under the fused SwiGLU: 64 gate + 64 up rows of B
/// per stage, two TMA boxes), one stage of A and B per K block. ``first``: the first unit's loads,
/// located before the CTA sync (or just now). kScaleTma (general::ScaleSource): also the stage's
/// As and / or Bs box into its slots in ``scale_slots`` (general::ScaleSource's layout).
/// kScaleCopy: run by the producer's whole warp, lane 0 issuing the TMA, and every lane copying
/// its tile rows' As (rows past M read row M - 1, never stored) and lane 0 the tile's Bs into the
/// stage's slots by cp.async, each lane then arriving on the stage's full barrier when its copies
/// land: the warp never waits on a scale load, and the copies run as many stages ahead as the ring.
template <uint32_t kNumStages, uint32_t kSubTiles, bool kSwiGLU, int kScaleTma = 0, class Tiles, class Smem>
__device__ __forceinline__ void produce_units(const Tiles& tiles, const typename Tiles::Scheduler& sched,
                                              UnitLoads first, const Smem& smem, const TmaDescriptor* tmap_a,
                                              const TmaDescriptor* tmap_b, const TmaDescriptor* tmap_sa,
                                              const TmaDescriptor* tmap_sb, float* scale_slots,
                                              const ScaleCopySrc& copy = ScaleCopySrc{}) {
    constexpr uint32_t kAStage = Tiles::kRows * general::BLOCK_K;
    constexpr uint32_t kBStage = (Smem::kTileBytes / kNumStages) - kAStage;
    constexpr bool kCopy = (kScaleTma & general::kScaleCopy) != 0;     // slots filled by this warp's cp.async
    constexpr bool kWindow = (kScaleTma & general::kScaleWindow) != 0;
    using Windows = general::ScaleWindows<Tiles::kRows>;
    const Windows windows{scale_slots};
    PipelineState<2> wpipe;                        // the window being filled
    uint32_t windows_loaded = 0;
    constexpr bool kSlotsA = (kScaleTma & general::kScaleSlotsA) != 0 && !kCopy;
    constexpr bool kSlotsB = (kScaleTma & general::kScaleSlotsB) != 0 && !kCopy;
    constexpr uint32_t kScaleBoxBytes = (kSlotsA ? Tiles::kRows * 4u : 0u) + (kSlotsB ? 16u : 0u);   // the boxes
    float* b_slots = scale_slots + ((kSlotsA || kCopy) ? kNumStages * Tiles::kRows : 0u);
    constexpr uint32_t kCopyRows = kCopy ? Tiles::kRows / 32 : 1;     // per lane
    static_assert(!kCopy || (Tiles::kRows % 32 == 0 && kSubTiles == 1), "kScaleCopy: whole lanes, the plain GEMM");
    const uint32_t lane = threadIdx.x % 32;
    PipelineState<kNumStages> pipe;
    uint32_t loads = 0;                            // stages filled so far
    UnitLoads l = first;
    for (uint32_t u = blockIdx.x; u < sched.num_units; u += gridDim.x) {
        if (u != blockIdx.x) l = tiles.loads(sched, u);
        const float* pa[kCopyRows];
        const float* pb = nullptr;
        if constexpr (kCopy) {
#pragma unroll
            for (uint32_t j = 0; j < kCopyRows; ++j) {
                const uint32_t row = min(l.s_row + lane + 32 * j, tiles.M - 1);
                pa[j] = copy.a_scale + static_cast<int64_t>(row) * copy.sa_stride_m +
                        static_cast<int64_t>(l.w.kb_begin) * copy.sa_stride_k;
            }
            pb = copy.b_scale + static_cast<int64_t>(l.sb_row) * copy.sb_stride_n +
                 static_cast<int64_t>(l.w.kb_begin) * copy.sb_stride_k;
        }
        for (uint32_t sub = 0; sub < kSubTiles; ++sub) {
            for (uint32_t kb = l.w.kb_begin; kb < l.w.kb_end; ++kb, ++pipe, ++loads) {
                // The ring's first round needs no wait: every stage starts empty.
                if constexpr (kWindow) {
                    // A unit's first block and every 32nd: the next window, once the consumers
                    // are done with what it held two windows ago.
                    if (kb == l.w.kb_begin || kb % Windows::kBlocks == 0) {
                        if (windows_loaded >= 2) mbarrier_wait_parity(windows.empty(wpipe.stage), wpipe.empty_parity());
                        Mbarrier* wbar = windows.full(wpipe.stage);
                        mbarrier_arrive_expect_tx(wbar, Windows::kTxBytes);
                        const uint32_t k0 = kb & ~(Windows::kBlocks - 1);
                        tma_load_2d(windows.a(wpipe.stage), tmap_sa, wbar, k0, l.s_row);
                        tma_load_2d(windows.b(wpipe.stage), tmap_sb, wbar, k0, l.sb_row);
                        ++wpipe;
                        ++windows_loaded;
                    }
                }
                if (loads >= kNumStages) mbarrier_wait_parity(&smem.empty_bar[pipe.stage], pipe.empty_parity());
                if constexpr (kCopy) {
#pragma unroll
                    for (uint32_t j = 0; j < kCopyRows; ++j) {
                        cp_async_4(scale_slots + pipe.stage * Tiles::kRows + lane + 32 * j, pa[j]);
                        pa[j] += copy.sa_stride_k;
                    }
                    if (lane == 0) cp_async_4(b_slots + pipe.stage * general::kBSlotFloats + (kb & 3u), pb);
                    pb += copy.sb_stride_k;
                    cp_async_arrive_noinc(&smem.full_bar[pipe.stage]);
                    if (lane != 0) continue;
                }
                Mbarrier* bar = &smem.full_bar[pipe.stage];
                mbarrier_arrive_expect_tx(bar, kAStage + kBStage + kScaleBoxBytes);
                tma_load_2d(smem.a + pipe.stage * kAStage, tmap_a, bar, kb * general::BLOCK_K, l.a_row);
                if constexpr (kSlotsA) tma_load_2d(scale_slots + pipe.stage * Tiles::kRows, tmap_sa, bar, l.s_row, kb);
                if constexpr (kSlotsB)
                    tma_load_2d(b_slots + pipe.stage * general::kBSlotFloats, tmap_sb, bar, kb & ~3u, l.sb_row);
                uint8_t* b_stage = smem.b + pipe.stage * kBStage;
                if constexpr (kSwiGLU) {
                    const uint32_t gate_row = l.b_row + sub * swiglu::kActCols;
                    tma_load_2d(b_stage, tmap_b, bar, kb * general::BLOCK_K, gate_row);
                    tma_load_2d(b_stage + swiglu::kActCols * general::BLOCK_K, tmap_b, bar, kb * general::BLOCK_K,
                                gate_row + tiles.N);
                } else {
                    tma_load_2d(b_stage, tmap_b, bar, kb * general::BLOCK_K, l.b_row);
                }
            }
        }
    }
}

/// The CTA's start, common to the family, up to the CTA sync: the producer warpgroup drops to its
/// register budget (outside the grouped mode: before anything, see kProducerThread), thread 0
/// sets up the ring, grouped CTAs build their tile prefix, and (early_start) the producer's warp
/// locates its first unit.
template <uint32_t kNumStages, bool kTmaStore, bool kGrouped, class Tiles, class Smem>
__device__ __forceinline__ void general_cta_start(const Tiles& tiles, const Smem& smem, uint32_t* tile_prefix,
                                                  const TmaDescriptor* tmap_a, const TmaDescriptor* tmap_b,
                                                  const TmaDescriptor* tmap_c, uint32_t warp_idx, bool early_start,
                                                  typename Tiles::Scheduler& producer_sched, UnitLoads& producer_first,
                                                  uint32_t fillers = 1) {
    if (!kGrouped && warp_idx / 4 == 0) setmaxnreg_dec<general::kProducerRegs>();
    if (threadIdx.x == 0)
        init_tma_ring<kNumStages, kTmaStore>(tmap_a, tmap_b, tmap_c, smem.full_bar, smem.empty_bar,
                                             Tiles::kConsumerWarps, fillers);
    if constexpr (kGrouped)
        group_tile_prefix<Tiles::kTokenTile>(tiles.groups, tiles.num_groups, tiles.group_rows, tiles.M, tile_prefix);
    producer_early_start<!kGrouped>(warp_idx == general::kProducerThread / 32 && early_start, producer_sched,
                                    producer_first, [&]() { return tiles.scheduler(); },
                                    [&](const typename Tiles::Scheduler& s, uint32_t u) { return tiles.loads(s, u); });
    __syncthreads();
}

/// The producer warpgroup after the CTA sync: its thread kProducerThread runs produce_units.
template <uint32_t kNumStages, uint32_t kSubTiles, bool kSwiGLU, bool kGrouped, int kScaleTma = 0, class Tiles,
          class Smem>
__device__ __forceinline__ void general_producer(const Tiles& tiles, const Smem& smem, const TmaDescriptor* tmap_a,
                                                 const TmaDescriptor* tmap_b, bool early_start,
                                                 typename Tiles::Scheduler& producer_sched, UnitLoads producer_first,
                                                 const TmaDescriptor* tmap_sa = nullptr,
                                                 const TmaDescriptor* tmap_sb = nullptr,
                                                 float* scale_slots = nullptr,
                                                 const ScaleCopySrc& copy = ScaleCopySrc{}) {
    if constexpr (kGrouped) setmaxnreg_dec<general::kProducerRegs>();
    constexpr bool kCopy = (kScaleTma & general::kScaleCopy) != 0;      // the whole warp (produce_units)
    // FP8GEMM_GENERAL_ELECT_PRODUCER (the prelude of the lab switch of that name): the producer lane
    // chosen by elect.sync, so that ptxas knows one lane runs the TMA issues (under the plain
    // `threadIdx.x ==` test each sits in an ELECT / BRA.U.ANY loop; the dense kernel's producer,
    // bench/NOTES.md session 41). Any lane of warp 1 will do: the early start ran on all of it.
#ifdef FP8GEMM_GENERAL_ELECT_PRODUCER
    const bool producer = threadIdx.x / 32 == general::kProducerThread / 32 && (kCopy || elect_one_sync());
#else
    const bool producer = kCopy ? threadIdx.x / 32 == general::kProducerThread / 32
                                : threadIdx.x == general::kProducerThread;
#endif
    if (producer) {
        if (!early_start) producer_sched = tiles.scheduler();
        // The first unit's loads come from before the CTA sync (grouped, split: located here);
        // each next unit's are located after the previous unit's last load.
        UnitLoads l = producer_first;
        if (!early_start && blockIdx.x < producer_sched.num_units) l = tiles.loads(producer_sched, blockIdx.x);
        produce_units<kNumStages, kSubTiles, kSwiGLU, kScaleTma>(tiles, producer_sched, l, smem, tmap_a, tmap_b,
                                                                 tmap_sa, tmap_sb, scale_slots, copy);
        if constexpr (kCopy) cp_async_wait_all();
    }
}

}  // namespace fp8gemm
