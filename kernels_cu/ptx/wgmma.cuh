// ptx/wgmma.cuh: warpgroup MMA control and shared-memory matrix descriptors.
//
// NOTES: wgmma runs asynchronously and owns its accumulator registers until wgmma_wait.
// The compiler does not know that, so accumulators are pinned with wgmma_fence_operand before
// the first wgmma and after the wait: otherwise it may read or write them in between.
#pragma once
#include "../common/types.cuh"
#include "mbarrier.cuh"
#include "wgmma_fp8.cuh"

namespace fp8gemm {

/// wgmma.fence: order earlier register accesses before the next wgmma.mma_async.
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

/// wgmma.commit_group: close the group of wgmma operations issued so far.
__device__ __forceinline__ void wgmma_commit_group() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

/// wgmma.wait_group N: wait until at most N committed groups are still pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7");
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/// A compiler-only fence on one accumulator register (emits no instruction).
__device__ __forceinline__ void wgmma_fence_operand(float& reg) {
    asm volatile("" : "+f"(reg)::"memory");
}

template <int kNum>
__device__ __forceinline__ void wgmma_fence_operands(float (&regs)[kNum]) {
#pragma unroll
    for (int i = 0; i < kNum; ++i) wgmma_fence_operand(regs[i]);
}

/// Shared-memory matrix descriptor for a K-major tile with the 128B swizzle, as TMA writes it
/// with CU_TENSOR_MAP_SWIZZLE_128B and 128-byte rows:
///   bits  0-13 start address >> 4
///   bits 16-29 leading byte offset >> 4 (unused for swizzled K-major; 1 by convention)
///   bits 32-45 stride byte offset >> 4  (8 rows x 128 B = 1024 B between core-matrix groups)
///   bits 62-63 swizzle mode (1 = 128B)
/// The tile must start 1024-byte aligned; a K step inside the 128-byte row is taken by adding
/// the byte offset to the start address (the swizzle is applied on absolute address bits).
__device__ __forceinline__ uint64_t make_smem_desc_k128b(const void* smem_ptr) {
    const uint64_t addr = smem_addr(smem_ptr);
    return ((addr & 0x3FFFFull) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

/// The same descriptor split in its two 32-bit halves: the low half (start address and leading
/// byte offset) is the only one that moves between stages and K steps, and the start-address field
/// never carries into bit 14 inside the 228 KB of shared memory, so a step is one 32-bit add.
/// NOTES: building the descriptor in 64-bit arithmetic per wgmma cost ~40 integer instructions per
/// K block in the general kernel's loop (bench/NOTES.md).
__device__ __forceinline__ uint32_t smem_desc_k128b_lo(const void* smem_ptr) {
    return ((smem_addr(smem_ptr) & 0x3FFFFu) >> 4) | (1u << 16);
}
constexpr uint32_t kSmemDescK128bHi = (1024u >> 4) | (1u << 30);
__device__ __forceinline__ uint64_t smem_desc_from_lo(uint32_t lo) {
    return (static_cast<uint64_t>(kSmemDescK128bHi) << 32) | lo;
}

}  // namespace fp8gemm
