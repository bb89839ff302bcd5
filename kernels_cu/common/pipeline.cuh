// common/pipeline.cuh: the {stage, phase} cursor of a multi-stage mbarrier ring.
//
// NOTES: the producer waits on "empty" with the opposite parity of the consumer's "full" wait,
// so that a fresh ring (all barriers in phase 0) lets the producer fill every stage at once.
#pragma once
#include "types.cuh"

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

}  // namespace fp8gemm
