// ptx/sync.cuh: register reallocation and warp-level helpers, one PTX instruction per function.
#pragma once
#include "../common/types.cuh"

namespace fp8gemm {

/// setmaxnreg.inc: grow this warpgroup's per-thread register budget to kRegs.
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
    static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: 24..256, step 8");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

/// setmaxnreg.dec: shrink this warpgroup's per-thread register budget to kRegs.
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
    static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: 24..256, step 8");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

/// The warp index, made warp-uniform for the compiler.
__device__ __forceinline__ uint32_t warp_idx_uniform() {
    return __shfl_sync(0xffffffffu, threadIdx.x / 32, 0);
}

}  // namespace fp8gemm
