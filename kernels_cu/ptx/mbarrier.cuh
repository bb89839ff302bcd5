// ptx/mbarrier.cuh: the shared-memory mbarrier, one PTX instruction per function.
//
// NOTES: a barrier completes a phase when its pending arrival count reaches zero AND its
// transaction count (bytes announced by expect_tx, decremented by TMA) reaches zero.
// Waiters test the parity of the phase they expect to have completed.
#pragma once
#include "../common/types.cuh"

namespace fp8gemm {

/// An mbarrier is an opaque 8-byte object in shared memory.
struct alignas(8) Mbarrier {
    uint64_t state;
};

__device__ __forceinline__ uint32_t smem_addr(const void* ptr) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

/// mbarrier.init: set the expected arrival count of a fresh barrier.
__device__ __forceinline__ void mbarrier_init(Mbarrier* bar, uint32_t arrive_count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(arrive_count));
}

/// fence.mbarrier_init: make barrier initialisation visible to the async proxy (TMA).
__device__ __forceinline__ void fence_mbarrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/// mbarrier.arrive: one arrival from this thread.
__device__ __forceinline__ void mbarrier_arrive(Mbarrier* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

/// mbarrier.arrive from this thread where `pred` holds, on a barrier given by its shared-window
/// address (smem_addr). NOTES: the predicate is inside the instruction, not a branch around it, so
/// the address stays one warp-uniform value computed for every lane: behind `if (lane == 0)` the
/// compiler rebuilt it inside the branch from the shared window each K block (5 instructions).
__device__ __forceinline__ void mbarrier_arrive_if(uint32_t bar, bool pred) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.u32 p, %1, 0;\n"
        "@p mbarrier.arrive.shared::cta.b64 _, [%0];\n"
        "}\n" ::"r"(bar), "r"(static_cast<uint32_t>(pred)) : "memory");
}

/// cp.async of 4 bytes from global to shared memory, cached in L1 (.ca): nothing waits on it here.
__device__ __forceinline__ void cp_async_4(void* smem_dst, const void* gmem_src) {
    asm volatile("cp.async.ca.shared::cta.global [%0], [%1], 4;"
                 ::"r"(smem_addr(smem_dst)), "l"(__cvta_generic_to_global(gmem_src)) : "memory");
}

/// cp.async.mbarrier.arrive.noinc: one arrival on `bar` once this thread's earlier cp.async have
/// landed; counted in the barrier's expected arrivals (noinc).
__device__ __forceinline__ void cp_async_arrive_noinc(Mbarrier* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}

/// cp.async.wait_all: this thread's cp.async have all landed.
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_all;" ::: "memory");
}

/// mbarrier.arrive.expect_tx: one arrival and announce `bytes` of incoming transactions.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(Mbarrier* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

/// mbarrier.try_wait.parity in a loop: block until the phase with `parity` has completed, on a
/// barrier given by its shared-window address (smem_addr).
__device__ __forceinline__ void mbarrier_wait_parity(uint32_t bar, uint32_t parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n"
        "}\n" ::"r"(bar), "r"(parity) : "memory");
}

__device__ __forceinline__ void mbarrier_wait_parity(Mbarrier* bar, uint32_t parity) {
    mbarrier_wait_parity(smem_addr(bar), parity);
}

}  // namespace fp8gemm
