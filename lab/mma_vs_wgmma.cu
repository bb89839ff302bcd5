// lab/mma_vs_wgmma.cu: does a chain of mma.sync m16n8k32 e4m3 give the same raw fp32 accumulator bits
// as wgmma m64nNk32 e4m3 over one 128-wide K block? (REPORT section 4 "D"; driver: lab/mma_vs_wgmma.py)
//
// Both kernels are deliberately dumb: every layout decision is made on the host (lab/mma_vs_wgmma.py,
// checked there by --dry-run), so the device code only moves bytes and issues the instructions.
//   mma_chain<kSteps>:  afrag / bfrag hold each lane's fragment registers, already packed per the PTX
//     ISA fragment tables of mma.m16n8k32 (.e4m3); the kernel issues kSteps mma.sync into one
//     accumulator that starts at +0 (C = 0 on the first) and stores the 4 floats of each lane raw.
//   wgmma_chain<N, kSteps>: img_a / img_b are the A [64 x 128] and B [128 x 128] tiles exactly as TMA's
//     128B swizzle would leave them in shared memory (the general / swap-AB kernels' layout); the kernel
//     copies them to 1024-aligned shared memory and issues kSteps wgmma m64nNk32 back to back with the
//     repo's descriptor (make_smem_desc_k128b, +32 bytes per k32 step, as swap_ab.cu), scale-d 0 on the
//     first, then stores the N/2 accumulators of each thread raw.
// One CTA per trial (blockIdx.x); 128 threads in both kernels.
#include "../kernels_cu/ptx/wgmma.cuh"
using namespace fp8gemm;

namespace lab {
constexpr int kTileA = 64 * 128;   // bytes of the A tile image (64 rows x 128 B)
constexpr int kTileB = 128 * 128;  // bytes of the B tile image (128 rows x 128 B; N <= 128 rows are read)
constexpr int kMTiles = 4, kNTiles = 16, kMaxSteps = 4;
}  // namespace lab

/// d = A (16 x 32, e4m3) * B (32 x 8, e4m3) + d, fp32 (the gemv kernel's instruction).
__device__ __forceinline__ void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// afrag [T][4 m-tiles][4 steps][32 lanes][4 regs], bfrag [T][16 n-tiles][4 steps][32 lanes][2 regs],
// out [T][4 m-tiles][16 n-tiles][32 lanes][4]. Warp w computes m-tile w against every n-tile.
template <int kSteps>
__global__ void __launch_bounds__(128) mma_chain(const uint32_t* __restrict__ afrag, const uint32_t* __restrict__ bfrag,
                                                 float* __restrict__ out) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
    static_assert(kSteps >= 1 && kSteps <= lab::kMaxSteps, "1..4 k32 steps");
    const int trial = blockIdx.x, lane = threadIdx.x % 32, mt = threadIdx.x / 32;
    uint32_t a[kSteps][4];
#pragma unroll
    for (int s = 0; s < kSteps; ++s)
#pragma unroll
        for (int r = 0; r < 4; ++r)
            a[s][r] = afrag[(((trial * lab::kMTiles + mt) * lab::kMaxSteps + s) * 32 + lane) * 4 + r];
    for (int nt = 0; nt < lab::kNTiles; ++nt) {
        uint32_t b[kSteps][2];
#pragma unroll
        for (int s = 0; s < kSteps; ++s)
#pragma unroll
            for (int r = 0; r < 2; ++r)
                b[s][r] = bfrag[(((trial * lab::kNTiles + nt) * lab::kMaxSteps + s) * 32 + lane) * 2 + r];
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int s = 0; s < kSteps; ++s) mma_e4m3(acc, a[s], b[s]);
        float* o = out + (((trial * lab::kMTiles + mt) * lab::kNTiles + nt) * 32 + lane) * 4;
#pragma unroll
        for (int i = 0; i < 4; ++i) o[i] = acc[i];
    }
#else
    asm volatile("trap;");
#endif
}

// img_a [T][kTileA], img_b [T][kTileB] (swizzled images), out [T][128 threads][N / 2].
// Dynamic shared memory: kTileA + kTileB + 1024 (for the 1024-byte alignment of the swizzle atoms).
template <int N, int kSteps>
__global__ void __launch_bounds__(128, 1) wgmma_chain(const uint8_t* __restrict__ img_a, const uint8_t* __restrict__ img_b,
                                                      float* __restrict__ out) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(kSteps >= 1 && kSteps <= lab::kMaxSteps && N % 8 == 0 && N >= 8 && N <= 128, "shape");
    extern __shared__ uint8_t smem_raw[];
    uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
    uint8_t* sa = base;
    uint8_t* sb = base + lab::kTileA;  // kTileA is a multiple of 1024
    const int trial = blockIdx.x, tid = threadIdx.x;
    {
        struct alignas(16) U4 { uint32_t x, y, z, w; };
        const U4* ga = reinterpret_cast<const U4*>(img_a + static_cast<long long>(trial) * lab::kTileA);
        const U4* gb = reinterpret_cast<const U4*>(img_b + static_cast<long long>(trial) * lab::kTileB);
        for (int i = tid; i < lab::kTileA / 16; i += 128) reinterpret_cast<U4*>(sa)[i] = ga[i];
        for (int i = tid; i < lab::kTileB / 16; i += 128) reinterpret_cast<U4*>(sb)[i] = gb[i];
    }
    // Generic-proxy stores -> async-proxy (wgmma) reads.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();

    using Mma = WgmmaFp8<N>;
    float d[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
    const uint64_t desc_a = make_smem_desc_k128b(sa);
    const uint64_t desc_b = make_smem_desc_k128b(sb);
    wgmma_fence_operands(d);
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
        // +32 bytes along the swizzled row = +2 in the descriptor's address field (swap_ab.cu).
        const uint64_t step = static_cast<uint64_t>(s * kWgmmaKFp8) >> 4;
        Mma::mma(desc_a + step, desc_b + step, d, s > 0 ? 1u : 0u);
    }
    wgmma_commit_group();
    wgmma_wait<0>();
    wgmma_fence_operands(d);
    float* o = out + (static_cast<long long>(trial) * 128 + tid) * (N / 2);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) o[i] = d[i];
#else
    asm volatile("trap;");
#endif
}

// For nvcc -cubin (the Python driver names these through NVRTC name expressions instead).
template __global__ void mma_chain<1>(const uint32_t*, const uint32_t*, float*);
template __global__ void mma_chain<4>(const uint32_t*, const uint32_t*, float*);
#define LAB_WG(N)                                                                         \
    template __global__ void wgmma_chain<N, 1>(const uint8_t*, const uint8_t*, float*); \
    template __global__ void wgmma_chain<N, 4>(const uint8_t*, const uint8_t*, float*);
LAB_WG(8)
LAB_WG(16)
LAB_WG(64)
LAB_WG(128)
