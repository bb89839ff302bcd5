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
#include "common/quant.cuh"

namespace fp8gemm {

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
