// quant.cuh: float -> FP8 E4M3 per 1 x 128 group, exactly as fp8gemm.reference quantizes (IEEE
// division by scale = max(amax, eps) / 448, nearest-even conversion saturated to +-448, NaN
// propagated through amax). Shared by the activation quantizer and the MoE glue kernels.
#pragma once
#include "types.cuh"

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

/// DeepSeek-V4's clamped SwiGLU of one (gate, up) pair: silu(min(gate, limit)) * clip(up, +-limit).
/// The one definition the unfused glue (moe_glue.cu) and the fused L1 epilogue
/// (swiglu_epilogue.cuh) both use, so that their FP8 outputs agree bit for bit.
__device__ __forceinline__ float swiglu_clamped(float gate, float up, float limit) {
    const float x = fminf(gate, limit);
    const float u = fminf(fmaxf(up, -limit), limit);
    return x / (1.0f + expf(-x)) * u;
}

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

}  // namespace fp8gemm
