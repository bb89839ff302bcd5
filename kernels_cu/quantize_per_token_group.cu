// quantize_per_token_group.cu: activations -> FP8 E4M3 + one fp32 scale per 1 x 128 group, on the GPU.
//
// For every row r and group g (columns 128g .. 128g+127, zero past K):
//   scale[r, g] = max(amax, eps) / 448,   q[r, c] = e4m3(x[r, c] / scale[r, g])  (nearest even, clipped)
// exactly as fp8gemm.reference.quantize_per_token_group computes it in float32: IEEE division,
// round-to-nearest-even conversion, NaN propagated through the group's amax (a group holding a
// NaN gets a NaN scale and NaN codes, as NumPy's max gives). The scales come out row-major
// [rows, ceil(K/128)], the layout the GEMM reads in place.
//
// One warp per (row, group), 4 consecutive values per lane. kVector (K % 128 == 0, x 16-byte
// aligned with a row stride of a multiple of 8 elements): one 8- or 16-byte load and one 4-byte
// store per lane; otherwise element-wise with bounds checks (K tails, odd strides).
#include "common/types.cuh"

namespace fp8gemm {

namespace quant {
constexpr uint32_t kGroup = 128;
constexpr uint32_t kPerLane = kGroup / 32;
constexpr float kFp8Max = 448.0f;

__device__ __forceinline__ float nan_max(float a, float b) {
    return (a > b || a != a) ? a : b;      // NaN wins, like NumPy's max
}

template <int kInType>   // 0 bfloat16, 1 float16, 2 float32
__device__ __forceinline__ float load_one(const void* base, int64_t index) {
    if constexpr (kInType == 0) {
        const uint32_t bits = static_cast<const uint16_t*>(base)[index];
        return __uint_as_float(bits << 16);
    } else if constexpr (kInType == 1) {
        const uint16_t bits = static_cast<const uint16_t*>(base)[index];
        float v;
        asm("cvt.f32.f16 %0, %1;" : "=f"(v) : "h"(bits));
        return v;
    } else {
        return static_cast<const float*>(base)[index];
    }
}

/// Two floats -> two E4M3 codes (nearest even, saturated to +-448), lo in the low byte.
__device__ __forceinline__ uint16_t to_e4m3x2(float lo, float hi) {
    uint16_t packed;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(hi), "f"(lo));
    return packed;
}
}  // namespace quant

template <int kInType, bool kVector>
__global__ void __launch_bounds__(256)
quantize_per_token_group_kernel(const void* __restrict__ x, int64_t ldx,      // [rows, k], ldx elements
                                uint8_t* __restrict__ q,                       // [rows, k] compact
                                float* __restrict__ scale,                     // [rows, groups] compact
                                uint32_t rows, uint32_t k, float eps) {
    using namespace quant;
    const uint32_t groups = (k + kGroup - 1) / kGroup;
    const uint64_t warp = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const uint32_t lane = threadIdx.x % 32;
    if (warp >= static_cast<uint64_t>(rows) * groups) return;      // whole warps leave together
    const uint32_t row = static_cast<uint32_t>(warp / groups);
    const uint32_t g = static_cast<uint32_t>(warp % groups);
    const uint32_t c0 = g * kGroup + lane * kPerLane;
    const int64_t in0 = static_cast<int64_t>(row) * ldx + c0;

    float v[kPerLane];
    if constexpr (kVector) {
        if constexpr (kInType == 2) {
            const float4 t = *reinterpret_cast<const float4*>(static_cast<const float*>(x) + in0);
            v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
        } else {
            const uint2 t = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(x) + in0);
            const uint16_t h[4] = {static_cast<uint16_t>(t.x & 0xFFFFu), static_cast<uint16_t>(t.x >> 16),
                                   static_cast<uint16_t>(t.y & 0xFFFFu), static_cast<uint16_t>(t.y >> 16)};
#pragma unroll
            for (uint32_t i = 0; i < kPerLane; ++i) v[i] = load_one<kInType>(h, i);
        }
    } else {
#pragma unroll
        for (uint32_t i = 0; i < kPerLane; ++i) v[i] = c0 + i < k ? load_one<kInType>(x, in0 + i) : 0.0f;
    }

    float amax = 0.0f;
#pragma unroll
    for (uint32_t i = 0; i < kPerLane; ++i) amax = nan_max(amax, fabsf(v[i]));
#pragma unroll
    for (uint32_t off = 16; off > 0; off >>= 1) amax = nan_max(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float s = __fdiv_rn(nan_max(amax, eps), kFp8Max);

    const uint16_t p01 = to_e4m3x2(__fdiv_rn(v[0], s), __fdiv_rn(v[1], s));
    const uint16_t p23 = to_e4m3x2(__fdiv_rn(v[2], s), __fdiv_rn(v[3], s));
    const int64_t out0 = static_cast<int64_t>(row) * k + c0;
    if constexpr (kVector) {
        *reinterpret_cast<uint32_t*>(q + out0) = static_cast<uint32_t>(p01) | (static_cast<uint32_t>(p23) << 16);
    } else {
        const uint8_t codes[kPerLane] = {static_cast<uint8_t>(p01 & 0xFFu), static_cast<uint8_t>(p01 >> 8),
                                         static_cast<uint8_t>(p23 & 0xFFu), static_cast<uint8_t>(p23 >> 8)};
#pragma unroll
        for (uint32_t i = 0; i < kPerLane; ++i)
            if (c0 + i < k) q[out0 + i] = codes[i];
    }
    if (lane == 0) scale[static_cast<int64_t>(row) * groups + g] = s;
}

}  // namespace fp8gemm
