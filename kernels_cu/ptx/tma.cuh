// ptx/tma.cuh: bulk tensor copies (TMA), one PTX instruction per function.
//
// NOTES: the tensor map lives in kernel parameter space (`const __grid_constant__`), so its
// generic address is valid for the copy engine. Boxes that cross the tensor's edge are filled
// with zeros and still count their full size against the mbarrier's transaction bytes.
#pragma once
#include "../common/types.cuh"
#include "mbarrier.cuh"

namespace fp8gemm {

/// prefetch.tensormap: warm the descriptor cache before the first copy.
__device__ __forceinline__ void prefetch_tensormap(const TmaDescriptor* desc) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(desc)) : "memory");
}

/// cp.async.bulk.tensor.2d global -> shared, completing on `bar`. c0 is the inner (contiguous)
/// coordinate in elements, c1 the outer (row) coordinate.
__device__ __forceinline__ void tma_load_2d(void* smem_dst, const TmaDescriptor* desc, Mbarrier* bar,
                                            int32_t c0, int32_t c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];"
        ::"r"(smem_addr(smem_dst)), "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(bar)),
          "r"(c0), "r"(c1)
        : "memory");
}

}  // namespace fp8gemm
