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

/// elect.sync over a whole converged warp: true in one lane. ptxas knows that lane alone runs
/// what it guards (a `threadIdx.x == n` test it cannot prove single: each TMA issue under it
/// then sits in an ELECT / BRA.U.ANY loop of its own).
__device__ __forceinline__ bool elect_one_sync() {
    uint32_t pred = 0;
    asm volatile("{\n\t.reg .b32 rx;\n\t.reg .pred px;\n\telect.sync rx|px, %1;\n\t@px mov.s32 %0, 1;\n\t}"
                 : "+r"(pred) : "r"(0xffffffffu));
    return pred != 0;
}

}  // namespace fp8gemm

namespace fp8gemm {

/// bar.sync id, count: a named barrier over `count` threads (a multiple of 32).
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t count) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

/// barrier.sync id, count without .aligned: for a barrier whose warps reach it from different
/// instructions (bar.sync is barrier.sync.aligned, which PTX defines only when every
/// participating thread executes the same instruction; compute-sanitizer synccheck reports the
/// other case as divergent threads).
__device__ __forceinline__ void named_barrier_sync_unaligned(uint32_t id, uint32_t count) {
    asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

/// ld.global.nc.f32 as a volatile asm: issued where the program puts it (ptxas neither hoists nor
/// sinks it across the other volatile asm), so a load can be placed blocks ahead of its use.
__device__ __forceinline__ float ld_nc_f32_pinned(const float* ptr) {
    float v;
    asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(ptr));
    return v;
}

/// st.global.cg.v4.f32: a 16-byte store that bypasses L1.
__device__ __forceinline__ void st_cg_f32x4(float* ptr, const float (&v)[4]) {
    asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};"
                 ::"l"(ptr), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3]) : "memory");
}

/// atom.acq_rel.gpu.add: add to a global counter with release semantics (this thread's earlier
/// writes, and those a barrier ordered before it, become visible with the new value) and acquire
/// semantics (writes released by earlier adders become visible to this thread, and through a
/// barrier to the CTA); returns the old value.
__device__ __forceinline__ uint32_t atomic_add_acq_rel_gpu(uint32_t* ptr, uint32_t v) {
    uint32_t old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(ptr), "r"(v) : "memory");
    return old;
}

}  // namespace fp8gemm
