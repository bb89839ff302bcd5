// ptx/cluster.cuh: thread-block cluster instructions (a CTA's rank, the cluster barrier, another
// CTA's shared memory, a TMA load multicast to several CTAs).
#pragma once
#include "../common/types.cuh"
#include "mbarrier.cuh"

namespace fp8gemm {

__device__ __forceinline__ uint32_t cluster_ctarank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

/// The number of CTAs in this CTA's cluster.
__device__ __forceinline__ uint32_t cluster_nctarank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}

/// Every thread of every CTA in the cluster arrives, then waits for all of them (release /
/// acquire at cluster scope: shared-memory writes before it are visible to the cluster after it).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive;\n" "barrier.cluster.wait;" ::: "memory");
}

/// barrier.cluster.arrive.release: this thread's arrival on the cluster barrier, its earlier
/// memory operations released at cluster scope (not .aligned: a warp may arrive diverged).
__device__ __forceinline__ void barrier_cluster_arrive_release() {
    asm volatile("barrier.cluster.arrive.release;" ::: "memory");
}

/// barrier.cluster.arrive.relaxed: this thread's arrival, ordering none of its memory operations
/// (for a thread that publishes nothing; the release form costs a MEMBAR.ALL.GPU).
__device__ __forceinline__ void barrier_cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
}

/// barrier.cluster.wait.acquire: wait for every thread of the cluster's arrival on the current
/// phase; what they released becomes visible to this thread.
__device__ __forceinline__ void barrier_cluster_wait_acquire() {
    asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

/// ld.shared::cluster.v4.f32: 16 bytes at a shared::cluster address (mapa_shared: this CTA's
/// shared memory or a peer's). NOTES: volatile, with a memory clobber, so that no compiler moves
/// it above the cluster barrier that publishes what it reads.
__device__ __forceinline__ float4 ld_shared_cluster_f32x4(uint32_t addr) {
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr)
        : "memory");
    return v;
}

/// The shared::cluster address of the same offset as local shared address ``addr`` in CTA ``rank``.
__device__ __forceinline__ uint32_t mapa_shared(uint32_t addr, uint32_t rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(addr), "r"(rank));
    return r;
}

/// Arrive on an mbarrier at a shared::cluster address (this CTA's or another's) where ``pred``.
/// NOTES: the default (release at CTA scope) form: `.release.cluster` compiles to MEMBAR.ALL.GPU
/// before each arrive and ran 1.6x slower (bench/NOTES.md); a consumer's arrival only says "done
/// reading this stage", which the wgmma wait before it already ordered.
__device__ __forceinline__ void mbarrier_arrive_cluster_if(uint32_t bar, bool pred) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.u32 p, %1, 0;\n"
        "@p mbarrier.arrive.shared::cluster.b64 _, [%0];\n"
        "}\n" ::"r"(bar), "r"(static_cast<uint32_t>(pred)) : "memory");
}

/// A 2D TMA load written to the same shared-memory offset in every CTA of ``cta_mask``, each
/// CTA's mbarrier at ``bar``'s offset receiving the bytes it got.
__device__ __forceinline__ void tma_load_2d_multicast(void* smem_dst, const TmaDescriptor* desc, Mbarrier* bar,
                                                      int32_t c0, int32_t c1, uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%3, %4}], [%2], %5;"
        ::"r"(smem_addr(smem_dst)), "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(bar)),
          "r"(c0), "r"(c1), "h"(cta_mask)
        : "memory");
}

}  // namespace fp8gemm
