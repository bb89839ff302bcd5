// common/pipeline.cuh: the {stage, phase} cursor of a multi-stage mbarrier ring, the ring's shared
// memory and set-up in kernels with one TMA producer, and a consumer's pass over stages it does
// not compute on.
//
// NOTES: the producer waits on "empty" with the opposite parity of the consumer's "full" wait,
// so that a fresh ring (all barriers in phase 0) lets the producer fill every stage at once.
#pragma once
#include "types.cuh"
#include "../ptx/mbarrier.cuh"
#include "../ptx/sync.cuh"
#include "../ptx/tma.cuh"

namespace fp8gemm {

template <uint32_t kNumStages>
struct PipelineState {
    uint32_t stage = 0;
    uint32_t phase = 0;

    __device__ __forceinline__ PipelineState& operator++() {
        if (++stage == kNumStages) {
            stage = 0;
            phase ^= 1;
        }
        return *this;
    }
    /// Parity the consumer waits for on the "full" barrier of this stage.
    __device__ __forceinline__ uint32_t full_parity() const { return phase; }
    /// Parity the producer waits for on the "empty" barrier of this stage.
    __device__ __forceinline__ uint32_t empty_parity() const { return phase ^ 1; }
};

/// The shared memory of a TMA-ring kernel, from a 1024-byte aligned base:
///   [A stages | B stages | C staging | hold | full barriers | empty barriers | flags | tail]
/// kHoldBytes: the fused SwiGLU's held sub-tile; kFlagBytes: the split-K last-split flag; the
/// tail (the grouped modes' tile prefix, sized by the host) starts after the flags. kBytes is
/// what the launch needs without the tail; the variants' smem_bytes (dispatch/) compute the same
/// sums, and tests/test_kernels_compile.py pins each of them to kBytes.
template <uint32_t kAStageBytes, uint32_t kBStageBytes, uint32_t kNumStages, uint32_t kStagingBytes,
          uint32_t kHoldBytes = 0, uint32_t kFlagBytes = 0>
struct RingSmem {
    static constexpr uint32_t kTileBytes = kNumStages * (kAStageBytes + kBStageBytes);
    static constexpr uint32_t kBytes = 1024 /* alignment slack */ + kTileBytes + kStagingBytes + kHoldBytes +
                                       2 * kNumStages * static_cast<uint32_t>(sizeof(Mbarrier)) + kFlagBytes;
    static_assert(kAStageBytes % 1024 == 0 && kBStageBytes % 1024 == 0, "128B swizzle needs 1024 B alignment");
    static_assert(kBytes <= kMaxSmemPerBlock, "shared memory over the SM90 limit");

    uint8_t* a;            // [kNumStages][kAStageBytes]
    uint8_t* b;            // [kNumStages][kBStageBytes]
    uint8_t* staging;      // kStagingBytes
    float* hold;           // kHoldBytes
    Mbarrier* full_bar;    // [kNumStages]
    Mbarrier* empty_bar;   // [kNumStages]
    uint32_t* flags;       // kFlagBytes
    uint32_t* tail;

    // NOTES: aligned by an offset from the dynamic shared array (not an integer cast), so the
    // compiler keeps knowing it is shared memory and stages the epilogue with STS, not generic stores.
    __device__ __forceinline__ explicit RingSmem(uint8_t* raw) {
        uint8_t* smem = raw + (1024u - smem_addr(raw) % 1024u) % 1024u;
        a = smem;
        b = smem + kNumStages * kAStageBytes;
        staging = smem + kTileBytes;
        hold = reinterpret_cast<float*>(smem + kTileBytes + kStagingBytes);
        full_bar = reinterpret_cast<Mbarrier*>(smem + kTileBytes + kStagingBytes + kHoldBytes);
        empty_bar = full_bar + kNumStages;
        flags = reinterpret_cast<uint32_t*>(empty_bar + kNumStages);
        tail = flags + kFlagBytes / 4;
    }
};

/// For thread 0 of a CTA with one TMA producer thread: prefetch the tensor maps (C's only where
/// the epilogue stores through TMA) and initialise the ring: each full barrier expects the
/// producer's one arrival (plus the TMA bytes) and ``fillers`` - 1 more (other threads that fill
/// part of each stage), each empty barrier one arrival per consumer warp.
/// The caller synchronises the CTA before any thread uses the barriers.
template <uint32_t kNumStages, bool kTmaStore>
__device__ __forceinline__ void init_tma_ring(const TmaDescriptor* tmap_a, const TmaDescriptor* tmap_b,
                                              const TmaDescriptor* tmap_c, Mbarrier* full_bar, Mbarrier* empty_bar,
                                              uint32_t consumer_warps, uint32_t fillers = 1) {
    prefetch_tensormap(tmap_a);
    prefetch_tensormap(tmap_b);
    if constexpr (kTmaStore) prefetch_tensormap(tmap_c);
#pragma unroll
    for (uint32_t s = 0; s < kNumStages; ++s) {
        mbarrier_init(&full_bar[s], fillers);
        mbarrier_init(&empty_bar[s], consumer_warps);
    }
    fence_mbarrier_init();
}

/// For the producer's whole warp, in a kernel whose scheduler needs nothing the CTA computes
/// (kEarly): build the scheduler and locate the first unit (blockIdx.x) before the CTA sync, so
/// that the first TMA issues right after it (bench/NOTES.md: ~1.1 us from kernel entry
/// before). NOTES: call it for all 32 lanes (a warp-uniform branch): computed by the producer lane
/// alone, the values left a divergent branch, and ptxas kept the producer loop built on them in
/// vector registers, moving four operands to uniform registers per TMA (R2UR 90 / 89
/// against 24 / 7 in the general / wg3 kernel).
template <bool kEarly, typename Sched, typename Loads, typename MakeSched, typename LocateUnit>
__device__ __forceinline__ void producer_early_start(bool is_producer, Sched& sched, Loads& first,
                                                     const MakeSched& make_scheduler, const LocateUnit& unit_loads) {
    if constexpr (kEarly) {
        if (is_producer) {
            sched = make_scheduler();
            first = unit_loads(sched, blockIdx.x);
        }
    }
}

/// The TMA producer thread's walk over its CTA's units (blockIdx.x, + gridDim.x, ...) and their
/// K blocks: it waits for each stage to empty (not in the ring's first round: every stage starts
/// empty) and calls load_stage(loads of the unit, K block, stage) to fill it. ``first``: the first
/// unit's loads where producer_early_start located them (kEarly), else they are located here; each
/// next unit's after the previous unit's last load.
template <uint32_t kNumStages, bool kEarly, typename Sched, typename Loads, typename LocateUnit, typename LoadStage>
__device__ __forceinline__ void producer_walk(const Sched& sched, Loads first, const LocateUnit& unit_loads,
                                              Mbarrier* empty_bar, const LoadStage& load_stage) {
    PipelineState<kNumStages> pipe;
    uint32_t loads = 0;                            // stages filled so far
    Loads l = first;
    if constexpr (!kEarly) {
        if (blockIdx.x < sched.num_units) l = unit_loads(sched, blockIdx.x);
    }
    for (uint32_t u = blockIdx.x; u < sched.num_units; u += gridDim.x) {
        if (u != blockIdx.x) l = unit_loads(sched, u);
        for (uint32_t kb = l.w.kb_begin; kb < l.w.kb_end; ++kb, ++pipe, ++loads) {
            if (loads >= kNumStages) mbarrier_wait_parity(&empty_bar[pipe.stage], pipe.empty_parity());
            load_stage(l, kb, pipe.stage);
        }
    }
}

/// The scale warps of a TMA ring (the tall kernel's scale slots):
/// the producer warpgroup's warps 0, 2 and 3 take the producer's K blocks in turn (block i of
/// this CTA's walk is warp i % kWarps's, kWarps = min(3, kNumStages): a warp's parity wait on a
/// stage's empty barrier must never be two phases ahead of it). For its block, lane l loads the
/// As of the unit's tile rows l, l + 32, ... below kRows (clamped to the last row the tile
/// stores: the others are never stored) and, with ``b_scale_at`` returning a pointer, lane 0 one
/// more float (the tile's Bs) into slot[kRows]; the loads go out before the warp waits for the
/// stage to empty, then it stores the slot and arrives on the stage's full barrier beside the TMA
/// thread (each full barrier expects both). ``rows(w)`` gives a unit's first row and last stored
/// row; ``b_scale_at(w)`` the unit's Bs pointer at K block 0 (nullptr: no Bs). NOTES: one warp
/// for every stage waited a round trip of its loads per stage (bench/NOTES.md).
template <uint32_t kNumStages, uint32_t kRows, uint32_t kSlotFloats, class Sched, class Rows, class BScaleAt>
__device__ __forceinline__ void fill_scale_slots(const Sched& sched, const Rows& rows, const BScaleAt& b_scale_at,
                                                 const float* a_scale, int64_t sa_stride_m, int64_t sa_stride_k,
                                                 int64_t sb_stride_k, Mbarrier* full_bar, Mbarrier* empty_bar,
                                                 float* slots, uint32_t producer_warp) {
    constexpr uint32_t kWarps = kNumStages < 3 ? kNumStages : 3;
    constexpr uint32_t kPerLane = kRows / 32;
    static_assert(kRows % 32 == 0 && kSlotFloats >= kRows, "a slot holds every tile row");
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const uint32_t mine = warp < producer_warp ? warp : warp - 1;
    if (warp == producer_warp || mine >= kWarps) return;
    PipelineState<kNumStages> pipe;
    uint32_t loads = 0;
    for (uint32_t u = blockIdx.x; u < sched.num_units; u += gridDim.x) {
        const auto w = sched.unit(u);
        uint32_t first_row, last_row;
        rows(w, first_row, last_row);
        const float* pb = b_scale_at(w);
        for (uint32_t kb = w.kb_begin; kb < w.kb_end; ++kb, ++pipe, ++loads) {
            if (loads % kWarps != mine) continue;
            float v[kPerLane];
#pragma unroll
            for (uint32_t j = 0; j < kPerLane; ++j) {
                const uint32_t row = min(first_row + lane + 32 * j, last_row);
                v[j] = __ldg(a_scale + static_cast<int64_t>(row) * sa_stride_m + static_cast<int64_t>(kb) * sa_stride_k);
            }
            const float vb = (pb != nullptr && lane == 0) ? __ldg(pb + static_cast<int64_t>(kb) * sb_stride_k) : 0.0f;
            if (loads >= kNumStages) mbarrier_wait_parity(&empty_bar[pipe.stage], pipe.empty_parity());
            float* slot = slots + pipe.stage * kSlotFloats;
#pragma unroll
            for (uint32_t j = 0; j < kPerLane; ++j) slot[lane + 32 * j] = v[j];
            if (pb != nullptr && lane == 0) slot[kRows] = vb;
            __syncwarp();
            if (lane == 0) mbarrier_arrive(&full_bar[pipe.stage]);     // releases the slot's stores
        }
    }
}

/// A consumer warpgroup with nothing to compute or store in a unit: it still takes each of the
/// unit's stages in turn and hands it back (the empty barrier counts every consumer warp), then
/// calls ``each(kb)`` (what else the kernel's consumers take per K block).
/// kOrdered: the other warpgroups pass the order barrier once per K block, so this one does too.
struct NoBlockHook {
    __device__ __forceinline__ void operator()(uint32_t) const {}
};
template <bool kOrdered = false, uint32_t kNumStages, class Each = NoBlockHook>
__device__ __forceinline__ void pass_stages(uint32_t kb_begin, uint32_t kb_end, PipelineState<kNumStages>& pipe,
                                            Mbarrier* full_bar, Mbarrier* empty_bar, uint32_t lane_idx,
                                            uint32_t order_barrier = 0, uint32_t order_threads = 0,
                                            const Each& each = Each{}) {
    for (uint32_t kb = kb_begin; kb < kb_end; ++kb, ++pipe) {
        mbarrier_wait_parity(&full_bar[pipe.stage], pipe.full_parity());
        __syncwarp();
        if (lane_idx == 0) mbarrier_arrive(&empty_bar[pipe.stage]);
        each(kb);
        if constexpr (kOrdered) named_barrier_sync_unaligned(order_barrier, order_threads);
    }
}

}  // namespace fp8gemm
