// quantize_per_block.cu: weights -> FP8 E4M3 + one fp32 scale per 128 x 128 block, on the GPU.
//
// For every block (bn, bk), rows 128 bn .. 128 bn + 127 and columns 128 bk .. 128 bk + 127 (zero
// past N and K):
//   scale[bn, bk] = max(amax, eps) / 448,   q[r, c] = e4m3(w[r, c] / scale[bn, bk])
// exactly as fp8gemm.reference.quantize_per_block computes it in float32 (common/quant.cuh: IEEE
// division, nearest-even conversion clipped to +-448, NaN propagated through the block's amax).
// The scales come out row-major [ceil(N/128), ceil(K/128)], the layout the GEMMs read. A batch of
// matrices (an MoE layer's experts, [E, N, K]) is one launch: blockIdx.z is the matrix.
//
// One CTA of 256 threads per block: warp w holds rows 16w .. 16w+15 of the block, lane l columns
// 4l .. 4l+3 of each, 64 values in registers from the amax to the conversion, so w is read once.
// kVec (the host's choice: K, the row stride and the matrix stride multiples of 4, the base 4
// elements aligned): a lane's 4 values of a row are one 8- or 16-byte load and its 4 codes one
// 4-byte store; element by element the loads and stores were the instruction bound (bf16 at a
// quarter of copy bandwidth, bench/NOTES.md).
#include "common/types.cuh"
#include "common/quant.cuh"

namespace fp8gemm {

namespace quant {
constexpr uint32_t kBlockRowsPerWarp = kGroup / 8;            // 16 rows of the block per warp
}  // namespace quant

template <int kInType, bool kVec>   // kInType 0 bfloat16, 1 float16, 2 float32
__global__ void __launch_bounds__(256, 1)   // (256) alone let ptxas cap it at 80 registers and spill
quantize_per_block_kernel(const void* __restrict__ w, int64_t ldw,   // [n, k], row stride ldw elements
                          int64_t w_batch,                           // elements between matrices
                          uint8_t* __restrict__ q,                   // [batch][n, k] compact
                          float* __restrict__ scale,                 // [batch][ceil(n/128), ceil(k/128)] compact
                          uint32_t n, uint32_t k, float eps) {
    using namespace quant;
    const uint32_t b = blockIdx.z;
    w = static_cast<const uint8_t*>(w) + static_cast<int64_t>(b) * w_batch * (kInType == 2 ? 4 : 2);
    q += static_cast<int64_t>(b) * n * k;
    scale += static_cast<int64_t>(b) * gridDim.y * gridDim.x;
    const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const uint32_t row0 = blockIdx.y * kGroup + warp * kBlockRowsPerWarp;
    const uint32_t col0 = blockIdx.x * kGroup + lane * kPerLane;

    float v[kBlockRowsPerWarp][kPerLane];
    float amax = 0.0f;
#pragma unroll
    for (uint32_t i = 0; i < kBlockRowsPerWarp; ++i) {
        const uint32_t r = row0 + i;
        const int64_t in0 = static_cast<int64_t>(r) * ldw + col0;
        if constexpr (kVec) {
            // k % 4 == 0: a lane's 4 columns lie all inside or all past K.
            const bool inside = r < n && col0 < k;
            if constexpr (kInType == 2) {
                const float4 x = inside ? *reinterpret_cast<const float4*>(static_cast<const float*>(w) + in0)
                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                v[i][0] = x.x; v[i][1] = x.y; v[i][2] = x.z; v[i][3] = x.w;
            } else {
                const uint2 x = inside ? *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(w) + in0)
                                       : make_uint2(0u, 0u);
                v[i][0] = from_bits16<kInType>(static_cast<uint16_t>(x.x & 0xFFFFu));
                v[i][1] = from_bits16<kInType>(static_cast<uint16_t>(x.x >> 16));
                v[i][2] = from_bits16<kInType>(static_cast<uint16_t>(x.y & 0xFFFFu));
                v[i][3] = from_bits16<kInType>(static_cast<uint16_t>(x.y >> 16));
            }
        } else {
#pragma unroll
            for (uint32_t j = 0; j < kPerLane; ++j)
                v[i][j] = (r < n && col0 + j < k) ? load_one<kInType>(w, in0 + j) : 0.0f;
        }
#pragma unroll
        for (uint32_t j = 0; j < kPerLane; ++j) amax = nan_max(amax, fabsf(v[i][j]));
    }
#pragma unroll
    for (uint32_t off = 16; off > 0; off >>= 1) amax = nan_max(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    __shared__ float warp_amax[8];
    if (lane == 0) warp_amax[warp] = amax;
    __syncthreads();
    amax = warp_amax[0];
#pragma unroll
    for (uint32_t i = 1; i < 8; ++i) amax = nan_max(amax, warp_amax[i]);
    const float s = __fdiv_rn(nan_max(amax, eps), kFp8Max);

    const float rcp = __frcp_rn(s);
    const bool fast = div_scale_fast(s);
#pragma unroll
    for (uint32_t i = 0; i < kBlockRowsPerWarp; ++i) {
        const uint32_t r = row0 + i;
        const uint16_t p01 = to_e4m3x2(div_scale(v[i][0], s, rcp, fast), div_scale(v[i][1], s, rcp, fast));
        const uint16_t p23 = to_e4m3x2(div_scale(v[i][2], s, rcp, fast), div_scale(v[i][3], s, rcp, fast));
        const uint32_t codes = static_cast<uint32_t>(p01) | (static_cast<uint32_t>(p23) << 16);
        const int64_t out0 = static_cast<int64_t>(r) * k + col0;
        if (kVec && r < n && col0 < k) {
            *reinterpret_cast<uint32_t*>(q + out0) = codes;
        } else if (!kVec && r < n) {
#pragma unroll
            for (uint32_t j = 0; j < kPerLane; ++j)
                if (col0 + j < k) q[out0 + j] = static_cast<uint8_t>(codes >> (8 * j));
        }
    }
    if (threadIdx.x == 0) scale[static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x] = s;
}

}  // namespace fp8gemm
