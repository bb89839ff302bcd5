// common/pipeline.cuh: the {stage, phase} cursor of a multi-stage mbarrier ring, and the ring's
// set-up in kernels with one TMA producer.
//
// NOTES: the producer waits on "empty" with the opposite parity of the consumer's "full" wait,
// so that a fresh ring (all barriers in phase 0) lets the producer fill every stage at once.
#pragma once
#include "types.cuh"
#include "../ptx/mbarrier.cuh"
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

/// For thread 0 of a CTA with one TMA producer thread: prefetch the tensor maps (C's only where
/// the epilogue stores through TMA) and initialise the ring: each full barrier expects the
/// producer's one arrival (plus the TMA bytes), each empty barrier one arrival per consumer warp.
/// The caller synchronises the CTA before any thread uses the barriers.
template <uint32_t kNumStages, bool kTmaStore>
__device__ __forceinline__ void init_tma_ring(const TmaDescriptor* tmap_a, const TmaDescriptor* tmap_b,
                                              const TmaDescriptor* tmap_c, Mbarrier* full_bar, Mbarrier* empty_bar,
                                              uint32_t consumer_warps) {
    prefetch_tensormap(tmap_a);
    prefetch_tensormap(tmap_b);
    if constexpr (kTmaStore) prefetch_tensormap(tmap_c);
#pragma unroll
    for (uint32_t s = 0; s < kNumStages; ++s) {
        mbarrier_init(&full_bar[s], 1);
        mbarrier_init(&empty_bar[s], consumer_warps);
    }
    fence_mbarrier_init();
}

/// For the producer's whole warp, in a kernel whose scheduler needs nothing the CTA computes
/// (kEarly): build the scheduler and locate the first unit (blockIdx.x) before the CTA sync, so
/// that the first TMA issues right after it (bench/NOTES.md session 14: ~1.1 us from kernel entry
/// before). NOTES: call it for all 32 lanes (a warp-uniform branch): computed by the producer lane
/// alone, the values left a divergent branch, and ptxas kept the producer loop built on them in
/// vector registers, moving four operands to uniform registers per TMA (session 15: R2UR 90 / 89
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

}  // namespace fp8gemm
