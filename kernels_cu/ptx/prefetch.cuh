// ptx/prefetch.cuh: a hint to bring global memory into L2 ahead of its loads.
#pragma once
#include "../common/types.cuh"

namespace fp8gemm {

/// prefetch.global.L2: start fetching the line holding `ptr` (a valid address) into L2; nothing
/// waits on it.
__device__ __forceinline__ void prefetch_l2(const void* ptr) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<uint64_t>(ptr)));
}

}  // namespace fp8gemm
