// sm90_fp8_gemm_gemv.cu: the W8A8 block-FP8 GEMM for decode, M <= 16 tokens (SM89+ mma.sync).
//
// Same operands and result as sm90_fp8_gemm_general.cu (read its header first):
//   C[M, N] = (A * As) @ (B * Bs)^T, A [M, K] and B [N, K] FP8 E4M3 (rows 16-byte aligned), As / Bs
//   fp32 with any strides, C bf16 / fp16 / fp32 with unit stride along N.
// Which shapes: M <= 8 * kTokenTiles (8 or 16), K a multiple of 16, any N. The dispatcher sends it
// decode shapes where it beats swap-AB + split-K (dispatch/gemv.py, bench/NOTES.md).
//
// Why a separate kernel: at a few tokens the GEMM is a stream of the weights. The general kernel's
// swap-AB mode needs 128 weight rows per tile, so small N gets few tiles, and it splits K across
// CTAs to use the SMs, which costs a workspace round trip, a handshake and a reduction by the last
// CTA (~1.8 us of a 4.7 us GEMM at 512 x 4096; bench/NOTES.md). Here a CTA owns 16 weight
// rows and all of K: its kWarps warps take K blocks in turn and reduce in shared memory, in warp
// order (deterministic), so nothing crosses CTAs and N / 16 CTAs stream the weights.
//
// Per warp and K block: warp-level MMA m16n8k32 (weights = A operand, 16 rows; tokens = B operand,
// 8 columns), 4 of them over the block's 128 bytes, into a fresh accumulator promoted with
// As[token, kb] * Bs[n / 128, kb] (the same per-block promotion as the general kernel).
// Loads are 16 bytes per lane straight from global memory into the MMA fragments: the fragment
// layout fixes which k slot each lane holds, and any permutation of k inside a 64-byte chunk that
// A and B share leaves the dot product unchanged. Lane (g = lane / 4, t = lane % 4) loads bytes
// [16t, 16t + 16) of each 64-byte chunk of weight rows g and g + 8 and of token g; MMA step s of
// the chunk takes bytes 8s .. 8s + 7 of those 16 as k slots {4t..4t+3} and {16+4t..16+4t+3}:
// the same slot -> byte map for both operands, and the 8 (t, s) pairs cover all 64 bytes once.
#include "common/types.cuh"

namespace fp8gemm {

namespace gemv {
constexpr uint32_t kRows = 16;           // weight rows per CTA (MMA M)
constexpr uint32_t kTokens = 8;          // tokens per token tile (MMA N)
constexpr uint32_t BLOCK_K = 128;        // one scale block along K
constexpr uint32_t kChunk = 64;          // bytes of K per lane quad: 4 lanes x 16 bytes

struct alignas(16) U4 {
    uint32_t x, y, z, w;
};

/// 16 bytes from global memory, or zeros where ``ok`` is false (nothing is read then).
__device__ __forceinline__ U4 load16(const uint8_t* p, bool ok) {
    U4 v{0u, 0u, 0u, 0u};
    if (ok) {
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p));
    }
    return v;
}

/// d = A (16 x 32, e4m3) * B (32 x 8, e4m3) + c, FP32.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
}  // namespace gemv

template <uint32_t kTokenTiles, uint32_t kWarps, uint32_t kUnroll, int kOutType>
__global__ void __launch_bounds__(kWarps * 32, 2)
sm90_fp8_gemm_gemv_kernel(const __grid_constant__ TmaDescriptor tmap_a,   // unused: the argument block
                          const __grid_constant__ TmaDescriptor tmap_b,   // starts as every GEMM
                          const __grid_constant__ TmaDescriptor tmap_c,   // kernel's (launcher.gemm_args)
                          const float* __restrict__ a_scale, int64_t sa_stride_m, int64_t sa_stride_k,
                          const float* __restrict__ b_scale, int64_t sb_stride_n, int64_t sb_stride_k,
                          void* __restrict__ out, int64_t ldc, uint32_t M, uint32_t N,
                          const uint8_t* __restrict__ a, int64_t lda,    // A [M, K], row pitch in bytes
                          const uint8_t* __restrict__ b, int64_t ldb,    // B [N, K]
                          uint32_t K) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
    using namespace gemv;
    constexpr OutType kOut = static_cast<OutType>(kOutType);
    static_assert(kTokenTiles == 1 || kTokenTiles == 2, "8 or 16 tokens");
    static_assert(kWarps >= 1 && kWarps <= 8 && kUnroll >= 1 && kUnroll <= 4, "warps 1..8, unroll 1..4");
    constexpr uint32_t kVals = kTokenTiles * 4;          // accumulator floats per lane
    __shared__ float partial[kWarps][kVals][32];

    const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const uint32_t g = lane / 4, t = lane % 4;
    const uint32_t n0 = blockIdx.x * kRows;
    const uint32_t k_blocks = (K + BLOCK_K - 1) / BLOCK_K;
    // This lane's weight rows g, g + 8 and tokens g (+ 8 per tile): pointers at byte 16t of a chunk.
    const bool row_ok0 = n0 + g < N, row_ok1 = n0 + g + 8 < N;
    const uint8_t* w0 = b + static_cast<int64_t>(row_ok0 ? n0 + g : 0) * ldb + 16 * t;
    const uint8_t* w1 = b + static_cast<int64_t>(row_ok1 ? n0 + g + 8 : 0) * ldb + 16 * t;
    const uint8_t* x[kTokenTiles];
    bool tok_ok[kTokenTiles];
#pragma unroll
    for (uint32_t j = 0; j < kTokenTiles; ++j) {
        tok_ok[j] = g + 8 * j < M;
        x[j] = a + static_cast<int64_t>(tok_ok[j] ? g + 8 * j : 0) * lda + 16 * t;
    }
    // This lane's accumulator columns are tokens 2t, 2t + 1 (+ 8 per tile); their scale rows,
    // clamped to a valid token (columns past M are never stored).
    const float* sa[kTokenTiles][2];
#pragma unroll
    for (uint32_t j = 0; j < kTokenTiles; ++j)
#pragma unroll
        for (uint32_t e = 0; e < 2; ++e)
            sa[j][e] = a_scale + static_cast<int64_t>(min(2 * t + e + 8 * j, M - 1)) * sa_stride_m;
    const float* sb = b_scale + static_cast<int64_t>(n0 / kScaleBlock) * sb_stride_n;

    float total[kVals];
#pragma unroll
    for (uint32_t i = 0; i < kVals; ++i) total[i] = 0.0f;

    // K blocks warp, warp + kWarps, ...; kUnroll of them loaded at once (all loads in flight).
    for (uint32_t kb0 = warp; kb0 < k_blocks; kb0 += kWarps * kUnroll) {
        U4 wv[kUnroll][2][2];                  // [block][chunk][row g, g + 8]
        U4 xv[kUnroll][2][kTokenTiles];        // [block][chunk][token tile]
        float s_a[kUnroll][kTokenTiles][2], s_b[kUnroll];
#pragma unroll
        for (uint32_t u = 0; u < kUnroll; ++u) {
            const uint32_t kb = kb0 + u * kWarps;
            const bool blk = kb < k_blocks;
#pragma unroll
            for (uint32_t c = 0; c < 2; ++c) {
                const uint32_t off = kb * BLOCK_K + c * kChunk + 16 * t;   // K is a multiple of 16
                const bool in_k = blk && off < K;
                wv[u][c][0] = load16(w0 + kb * BLOCK_K + c * kChunk, in_k && row_ok0);
                wv[u][c][1] = load16(w1 + kb * BLOCK_K + c * kChunk, in_k && row_ok1);
#pragma unroll
                for (uint32_t j = 0; j < kTokenTiles; ++j)
                    xv[u][c][j] = load16(x[j] + kb * BLOCK_K + c * kChunk, in_k && tok_ok[j]);
            }
            const uint32_t kbc = blk ? kb : 0;
#pragma unroll
            for (uint32_t j = 0; j < kTokenTiles; ++j) {
                s_a[u][j][0] = __ldg(sa[j][0] + static_cast<int64_t>(kbc) * sa_stride_k);
                s_a[u][j][1] = __ldg(sa[j][1] + static_cast<int64_t>(kbc) * sa_stride_k);
            }
            s_b[u] = __ldg(sb + static_cast<int64_t>(kbc) * sb_stride_k);
        }
#pragma unroll
        for (uint32_t u = 0; u < kUnroll; ++u) {
            if (kb0 + u * kWarps >= k_blocks) break;
#pragma unroll
            for (uint32_t j = 0; j < kTokenTiles; ++j) {
                float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (uint32_t c = 0; c < 2; ++c) {
                    const U4& r0 = wv[u][c][0];
                    const U4& r1 = wv[u][c][1];
                    const U4& xt = xv[u][c][j];
                    mma_e4m3(acc, r0.x, r1.x, r0.y, r1.y, xt.x, xt.y);    // bytes 0..7 of the 16
                    mma_e4m3(acc, r0.z, r1.z, r0.w, r1.w, xt.z, xt.w);    // bytes 8..15
                }
                // acc: [row g, token 2t], [row g, token 2t+1], [row g+8, token 2t], [row g+8, token 2t+1]
                const float s0 = s_a[u][j][0] * s_b[u], s1 = s_a[u][j][1] * s_b[u];
                total[4 * j + 0] += acc[0] * s0;
                total[4 * j + 1] += acc[1] * s1;
                total[4 * j + 2] += acc[2] * s0;
                total[4 * j + 3] += acc[3] * s1;
            }
        }
    }

    // The warps' partial sums, added in warp order, one output per thread.
#pragma unroll
    for (uint32_t i = 0; i < kVals; ++i) partial[warp][i][lane] = total[i];
    __syncthreads();
    constexpr uint32_t kOutputs = kRows * kTokens * kTokenTiles;
    for (uint32_t o = threadIdx.x; o < kOutputs; o += kWarps * 32) {
        const uint32_t r = o % kRows, m = o / kRows;       // weight row in the CTA, token
        const uint32_t src_lane = (r % 8) * 4 + (m % 8) / 2;
        const uint32_t src_val = (m / 8) * 4 + (r / 8) * 2 + (m % 2);
        float v = 0.0f;
#pragma unroll
        for (uint32_t w = 0; w < kWarps; ++w) v += partial[w][src_val][src_lane];
        if (m < M && n0 + r < N) store_out<kOut>(out, static_cast<int64_t>(m) * ldc + n0 + r, v);
    }
#else
    asm volatile("trap;");
#endif
}

}  // namespace fp8gemm
