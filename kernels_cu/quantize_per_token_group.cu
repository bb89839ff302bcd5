// quantize_per_token_group.cu: activations -> FP8 E4M3 + one fp32 scale per 1 x 128 group, on the GPU.
//
// For every row r and group g (columns 128g .. 128g+127, zero past K):
//   scale[r, g] = max(amax, eps) / 448,   q[r, c] = e4m3(x[r, c] / scale[r, g])  (nearest even, clipped)
// exactly as fp8gemm.reference.quantize_per_token_group computes it in float32: IEEE division,
// round-to-nearest-even conversion, NaN propagated through the group's amax (a group holding a
// NaN gets a NaN scale and NaN codes, as NumPy's max gives). The scales come out row-major
// [rows, ceil(K/128)], the layout the GEMM reads in place.
//
// The vector path (K % 128 == 0, x 16-byte aligned with a row stride of a multiple of 8 elements): a
// half-warp per group, 8 consecutive values per lane (16-byte loads, 8-byte stores), and each warp
// takes 2 * kLoads groups with all its loads issued before any reduction, so that enough bytes
// are in flight to stream at memory speed (one group per warp kept only ~16 KB per SM in flight:
// 1.7 TB/s, bench/NOTES.md). The division by the scale is exact without a divide per value
// (div_scale). Otherwise one warp per (row, group), 4 values per lane, element-wise
// with bounds checks (K tails, odd strides).
#include "common/types.cuh"

namespace fp8gemm {

namespace quant {
constexpr uint32_t kGroup = 128;
constexpr uint32_t kPerLane = kGroup / 32;
constexpr float kFp8Max = 448.0f;

__device__ __forceinline__ float nan_max(float a, float b) {
    return (a > b || a != a) ? a : b;      // NaN wins, like NumPy's max
}

/// A bf16 (kInType 0) or fp16 (1) bit pattern -> float, exactly.
template <int kInType>
__device__ __forceinline__ float from_bits16(uint16_t bits) {
    if constexpr (kInType == 0) {
        return __uint_as_float(static_cast<uint32_t>(bits) << 16);
    } else {
        float v;
        asm("cvt.f32.f16 %0, %1;" : "=f"(v) : "h"(bits));
        return v;
    }
}

template <int kInType>   // 0 bfloat16, 1 float16, 2 float32
__device__ __forceinline__ float load_one(const void* base, int64_t index) {
    if constexpr (kInType != 2) {
        return from_bits16<kInType>(static_cast<const uint16_t*>(base)[index]);
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

constexpr uint32_t kVecPerLane = 8;                         // values per lane, vector path

/// x / s rounded to nearest as IEEE division does, for the group's scale s with rcp = RN(1/s):
/// q0 = RN(x * rcp) is within 1 ulp, r = x - s * q0 is exact (FMA), RN(q0 + r * rcp) is the
/// correctly rounded quotient (Markstein). Needs no underflow in r: ``fast`` holds for
/// 2^-80 <= s <= 2^100; other scales (tiny eps, Inf, NaN) take the IEEE division.
__device__ __forceinline__ float div_scale(float x, float s, float rcp, bool fast) {
    if (fast) {
        const float q0 = __fmul_rn(x, rcp);
        const float r = __fmaf_rn(-q0, s, x);
        return __fmaf_rn(r, rcp, q0);
    }
    return __fdiv_rn(x, s);
}

__device__ __forceinline__ bool div_scale_fast(float s) { return s >= 0x1p-80f && s <= 0x1p100f; }

/// Eight values of the vector path: one 16-byte load (two for fp32).
template <int kInType>
__device__ __forceinline__ void load8(const void* x, int64_t index, float (&v)[kVecPerLane]) {
    if constexpr (kInType == 2) {
        const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(x) + index);
        const float4 t0 = p[0], t1 = p[1];
        v[0] = t0.x; v[1] = t0.y; v[2] = t0.z; v[3] = t0.w;
        v[4] = t1.x; v[5] = t1.y; v[6] = t1.z; v[7] = t1.w;
    } else {
        const uint4 t = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x) + index);
        const uint32_t w[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            v[2 * i] = from_bits16<kInType>(static_cast<uint16_t>(w[i] & 0xFFFFu));
            v[2 * i + 1] = from_bits16<kInType>(static_cast<uint16_t>(w[i] >> 16));
        }
    }
}
}  // namespace quant

// kLoads = 0: the element path; > 0: the vector path with that many groups in flight per
// half-warp (quantize.py: 2 for big inputs, measured best of 1/2/4; 1 when there are too few
// groups to fill the GPU that way).
template <int kInType, int kLoads>
__global__ void __launch_bounds__(256)
quantize_per_token_group_kernel(const void* __restrict__ x, int64_t ldx,      // [rows, k], ldx elements
                                uint8_t* __restrict__ q,                       // [rows, k] compact
                                float* __restrict__ scale,                     // [rows, groups] compact
                                uint32_t rows, uint32_t k, float eps) {
    using namespace quant;
    const uint32_t groups = (k + kGroup - 1) / kGroup;
    if constexpr (kLoads > 0) {
        constexpr uint32_t kVecLoads = kLoads;
        constexpr uint32_t kGroupsPerWarp = 2 * kVecLoads;      // quantize.py: warps = ceil(groups / this)
        const uint64_t total = static_cast<uint64_t>(rows) * groups;
        const uint64_t warp = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
        const uint32_t lane = threadIdx.x % 32;
        const uint32_t half = lane / 16, hl = lane % 16;
        float v[kVecLoads][kVecPerLane];
        uint64_t gi[kVecLoads];
#pragma unroll
        for (uint32_t j = 0; j < kVecLoads; ++j) {       // every load first
            gi[j] = warp * kGroupsPerWarp + 2 * j + half;
            if (gi[j] < total) {
                const uint64_t row = gi[j] / groups;
                const uint32_t c0 = static_cast<uint32_t>(gi[j] % groups) * kGroup + hl * kVecPerLane;
                load8<kInType>(x, static_cast<int64_t>(row) * ldx + c0, v[j]);
            } else {
#pragma unroll
                for (uint32_t i = 0; i < kVecPerLane; ++i) v[j][i] = 0.0f;
            }
        }
#pragma unroll
        for (uint32_t j = 0; j < kVecLoads; ++j) {
            float amax = 0.0f;
#pragma unroll
            for (uint32_t i = 0; i < kVecPerLane; ++i) amax = nan_max(amax, fabsf(v[j][i]));
#pragma unroll
            for (uint32_t off = 8; off > 0; off >>= 1)        // within the half-warp
                amax = nan_max(amax, __shfl_xor_sync(0xffffffffu, amax, off));
            const float s = __fdiv_rn(nan_max(amax, eps), kFp8Max);
            const float rcp = __frcp_rn(s);
            const bool fast = div_scale_fast(s);
            uint32_t packed[2];
#pragma unroll
            for (uint32_t w = 0; w < 2; ++w) {
                const uint16_t lo = to_e4m3x2(div_scale(v[j][4 * w], s, rcp, fast),
                                              div_scale(v[j][4 * w + 1], s, rcp, fast));
                const uint16_t hi = to_e4m3x2(div_scale(v[j][4 * w + 2], s, rcp, fast),
                                              div_scale(v[j][4 * w + 3], s, rcp, fast));
                packed[w] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
            }
            if (gi[j] < total) {
                // q is compact [rows, k] and k % 128 == 0: group gi starts at byte gi * 128.
                *reinterpret_cast<uint2*>(q + gi[j] * kGroup + hl * kVecPerLane) = make_uint2(packed[0], packed[1]);
                if (hl == 0) scale[gi[j]] = s;
            }
        }
        return;
    }
    const uint64_t warp = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const uint32_t lane = threadIdx.x % 32;
    if (warp >= static_cast<uint64_t>(rows) * groups) return;      // whole warps leave together
    const uint32_t row = static_cast<uint32_t>(warp / groups);
    const uint32_t g = static_cast<uint32_t>(warp % groups);
    const uint32_t c0 = g * kGroup + lane * kPerLane;
    const int64_t in0 = static_cast<int64_t>(row) * ldx + c0;

    float v[kPerLane];
#pragma unroll
    for (uint32_t i = 0; i < kPerLane; ++i) v[i] = c0 + i < k ? load_one<kInType>(x, in0 + i) : 0.0f;

    float amax = 0.0f;
#pragma unroll
    for (uint32_t i = 0; i < kPerLane; ++i) amax = nan_max(amax, fabsf(v[i]));
#pragma unroll
    for (uint32_t off = 16; off > 0; off >>= 1) amax = nan_max(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float s = __fdiv_rn(nan_max(amax, eps), kFp8Max);

    const float rcp = __frcp_rn(s);
    const bool fast = div_scale_fast(s);
    const uint16_t p01 = to_e4m3x2(div_scale(v[0], s, rcp, fast), div_scale(v[1], s, rcp, fast));
    const uint16_t p23 = to_e4m3x2(div_scale(v[2], s, rcp, fast), div_scale(v[3], s, rcp, fast));
    const int64_t out0 = static_cast<int64_t>(row) * k + c0;
    const uint8_t codes[kPerLane] = {static_cast<uint8_t>(p01 & 0xFFu), static_cast<uint8_t>(p01 >> 8),
                                     static_cast<uint8_t>(p23 & 0xFFu), static_cast<uint8_t>(p23 >> 8)};
#pragma unroll
    for (uint32_t i = 0; i < kPerLane; ++i)
        if (c0 + i < k) q[out0 + i] = codes[i];
    if (lane == 0) scale[static_cast<int64_t>(row) * groups + g] = s;
}

}  // namespace fp8gemm
