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

/// cp.async.bulk.tensor.2d shared -> global (bulk group): store a box; out-of-bounds parts of
/// the box are not written.
__device__ __forceinline__ void tma_store_2d(const TmaDescriptor* desc, const void* smem_src, int32_t c0,
                                             int32_t c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
                 ::"l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(smem_src)), "r"(c0), "r"(c1)
                 : "memory");
}

/// cp.async.bulk.commit_group: close the group of bulk stores issued so far by this thread.
__device__ __forceinline__ void tma_store_commit_group() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/// cp.async.bulk.wait_group.read N: the shared memory of all but N groups may be reused.
template <int N>
__device__ __forceinline__ void tma_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

/// cp.async.bulk.wait_group N: all but N groups have completed (their writes are done).
template <int N>
__device__ __forceinline__ void tma_store_wait() {
    asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}

/// fence.proxy.async.shared::cta: order this thread's ordinary shared-memory writes before
/// later async-proxy (TMA) reads of them.
__device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

}  // namespace fp8gemm
