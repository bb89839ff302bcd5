// lab/wgmma_rate.cu: raw wgmma throughput on one SM, no TMA and no barriers (bench/NOTES.md,
// session 10). Each of kWgs warpgroups per CTA loops over {fence; 4 x m64nNk32 from a fixed
// 128B-swizzled shared tile; commit; wait<kDepth>} into kAccs accumulators in turn; kRS takes A from
// registers (RS) instead of shared memory (SS); kPromote adds the kernel's per-block promotion
// (N/2 FFMA per thread into a running sum) after each group. One CTA per SM.
#include "../kernels_cu/ptx/wgmma.cuh"
using namespace fp8gemm;
#include "wgmma_rs.cuh"

// kPromote: 0 none; 1 wait<0> then N/2 FFMA into a running sum (the general kernel before v9);
// 2 as 1 over half the registers; 3 as 1 with FADD (no scale); 4 two accumulators in turn, the
// previous group promoted while the next one runs (v9); 5 as 4 with FADD; 6, 7: below.
template <int N, int kWgs, int kDepth, int kAccs, bool kRS, int kPromote>
__global__ void __launch_bounds__(kWgs * 128, 1) wgmma_rate(float* out, int iters, float scale) {
    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<unsigned long long>(smem) + 1023) & ~1023ull);
    for (int i = threadIdx.x; i < (64 * kWgs + 256) * 128 / 4; i += blockDim.x)
        reinterpret_cast<uint32_t*>(base)[i] = 0x38383838u * ((i & 7) == 1);
    __syncthreads();
    const int wg = threadIdx.x / 128;
    const uint32_t lo_a = smem_desc_k128b_lo(base + wg * 64 * 128);
    const uint32_t lo_b = smem_desc_k128b_lo(base + kWgs * 64 * 128);
    uint32_t afrag[4][4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int j = 0; j < 4; ++j) afrag[k][j] = 0x38383838u * ((threadIdx.x + k + j) & 1);
    constexpr int kAccN = kPromote >= 4 ? 2 : kAccs;
    float acc[kAccN][N / 2];
    float sum[kPromote ? N / 2 : 1];
#pragma unroll
    for (int i = 0; i < (kPromote ? N / 2 : 1); ++i) sum[i] = 0.0f;
#pragma unroll
    for (int a = 0; a < kAccN; ++a)
#pragma unroll
        for (int i = 0; i < N / 2; ++i) acc[a][i] = 0.0f;
    // kPromote 6: mode 4 with RS, A fragments loaded by ldmatrix.x4 from the 128B-swizzled tile
    // before every group (the shared-memory reads an RS kernel would add).
    const uint32_t lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const uint32_t lrow = warp * 16 + ((lane / 8) & 1) * 8 + lane % 8;
    const uint32_t a_row_addr = smem_addr(base + wg * 64 * 128) + lrow * 128;
    uint32_t afrag2[4][4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
#pragma unroll
        for (int j = 0; j < 4; ++j) afrag2[k][j] = afrag[k][j];
    const auto load_into = [&](uint32_t (&f)[4][4]) {
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const uint32_t chunk = 2 * k + lane / 16;
            const uint32_t addr = a_row_addr + ((chunk ^ (lrow & 7)) * 16);
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                         : "=r"(f[k][0]), "=r"(f[k][1]), "=r"(f[k][2]), "=r"(f[k][3])
                         : "r"(addr));
        }
    };
    const auto load_a = [&]() { load_into(afrag); };
    // kPromote 7: mode 4 with RS from two fragment sets in turn, the next group's A loaded by
    // ldmatrix right after this group's issue (before the promotion), off the critical path.
    const auto issue_f = [&](float (&d)[N / 2], uint32_t (&f)[4][4]) {
        wgmma_fence_operands(d);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; ++k) WgmmaFp8RS<N>::mma(f[k], smem_desc_from_lo(lo_b + 2 * k), d);
        wgmma_commit_group();
        wgmma_fence_operands(d);
    };
    const auto issue = [&](float (&d)[N / 2]) {
        if constexpr (kPromote == 6) load_a();
        wgmma_fence_operands(d);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            if constexpr (kRS)
                WgmmaFp8RS<N>::mma(afrag[k], smem_desc_from_lo(lo_b + 2 * k), d);
            else
                WgmmaFp8<N>::mma(smem_desc_from_lo(lo_a + 2 * k), smem_desc_from_lo(lo_b + 2 * k), d, 1u);
        }
        wgmma_commit_group();
        wgmma_fence_operands(d);
    };
    const auto promote = [&](float (&d)[N / 2]) {
        wgmma_fence_operands(d);
        constexpr int kCount = kPromote == 2 ? N / 4 : N / 2;
#pragma unroll
        for (int i = 0; i < kCount; ++i) {
            if constexpr (kPromote == 3 || kPromote == 5) sum[i] += d[i];
            else sum[i] += d[i] * scale;
        }
        wgmma_fence_operands(d);
    };
    // kPromote 8 / 9: v9 (mode 4) with the previous group's promotion spread between this group's
    // wgmma issues: 2 slices (after wgmma 2 and 4) or 4 slices (after each wgmma), each a commit.
    const auto issue_spread = [&](float (&d)[N / 2], float (&prev)[N / 2]) {
        constexpr int kSlices = kPromote == 8 ? 2 : 4;
        constexpr int kPer = N / 2 / kSlices;
        wgmma_fence_operands(d);
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            WgmmaFp8<N>::mma(smem_desc_from_lo(lo_a + 2 * k), smem_desc_from_lo(lo_b + 2 * k), d, 1u);
            if ((k + 1) % (4 / kSlices) == 0) {
                wgmma_commit_group();
                const int slice = (k + 1) / (4 / kSlices) - 1;
#pragma unroll
                for (int i = slice * kPer; i < (slice + 1) * kPer; ++i) sum[i] += prev[i] * scale;
            }
        }
        wgmma_fence_operands(d);
    };
    if constexpr (kPromote == 8 || kPromote == 9) {
        issue(acc[0]);
        wgmma_wait<0>();
        for (int it = 0; it < iters; it += 2) {
            issue_spread(acc[1], acc[0]);
            wgmma_wait<0>();
            issue_spread(acc[0], acc[1]);
            wgmma_wait<0>();
        }
    } else if constexpr (kPromote == 7) {
        issue_f(acc[0], afrag);
        wgmma_wait<0>();
        for (int it = 0; it < iters; it += 2) {
            issue_f(acc[1], afrag);
            load_into(afrag2);
            promote(acc[0]);
            wgmma_wait<0>();
            issue_f(acc[0], afrag2);
            load_into(afrag);
            promote(acc[1]);
            wgmma_wait<0>();
        }
    } else if constexpr (kPromote >= 4) {
        issue(acc[0]);
        wgmma_wait<0>();
        for (int it = 0; it < iters; it += 2) {
            issue(acc[1]);
            promote(acc[0]);
            wgmma_wait<0>();
            issue(acc[0]);
            promote(acc[1]);
            wgmma_wait<0>();
        }
    } else {
        for (int it = 0; it < iters; ++it) {
#pragma unroll
            for (int a = 0; a < kAccs; ++a) {
                issue(acc[a]);
                wgmma_wait<kDepth>();
                if constexpr (kPromote) promote(acc[a]);
            }
        }
    }
    wgmma_wait<0>();
    float s = 0.0f;
#pragma unroll
    for (int a = 0; a < kAccN; ++a)
#pragma unroll
        for (int i = 0; i < N / 2; ++i) s += acc[a][i];
    if constexpr (kPromote != 0)
#pragma unroll
        for (int i = 0; i < N / 2; ++i) s += sum[i];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

#define INST(N, W, D, A, RS, P) template __global__ void wgmma_rate<N, W, D, A, RS, P>(float*, int, float);
INST(128, 2, 0, 1, false, 0)
INST(128, 2, 0, 1, false, 1)
INST(128, 2, 0, 1, false, 2)
INST(128, 2, 0, 1, false, 3)
INST(128, 2, 0, 1, false, 4)
INST(128, 2, 0, 1, false, 5)
INST(128, 2, 0, 1, true, 1)
INST(128, 2, 0, 1, true, 4)
INST(128, 3, 0, 1, false, 1)
INST(256, 2, 0, 1, false, 0)
INST(64, 2, 0, 1, false, 1)
INST(64, 2, 0, 1, false, 4)
INST(128, 1, 0, 1, false, 4)
INST(128, 2, 0, 1, true, 6)
INST(64, 2, 0, 1, true, 4)
INST(64, 2, 0, 1, true, 6)
INST(128, 2, 0, 1, true, 7)
INST(128, 2, 0, 1, false, 8)
INST(128, 2, 0, 1, false, 9)
