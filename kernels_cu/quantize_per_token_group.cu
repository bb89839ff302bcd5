// quantize_per_token_group.cu: activations -> FP8 E4M3 + one fp32 scale per 1 x 128 group, on the GPU.
//
// For every row r and group g (columns 128g .. 128g+127, zero past K):
//   scale[r, g] = max(amax, eps) / 448,   q[r, c] = e4m3(x[r, c] / scale[r, g])  (nearest even, clipped)
// exactly as fp8gemm.reference.quantize_per_token_group computes it in float32: IEEE division,
// round-to-nearest-even conversion, NaN propagated through the group's amax (a group holding a
// NaN gets a NaN scale and NaN codes, as NumPy's max gives). The scales come out row-major
// [rows, ceil(K/128)], the layout the GEMM reads in place, or (scale_ld > 0) M-major: scale[r, g]
// at g * scale_ld + r, the layout whose columns a TMA box can fetch per K block (the GEMMs' As
// slots, and DeepGEMM's A scales) when scale_ld is a multiple of 4.
//
// The vector path (K % 128 == 0, x 16-byte aligned with a row stride of a multiple of 8 elements):
// 8 lanes per group, 16 values per lane, a warp takes 4 * kLoads groups with every load issued
// before any arithmetic. Each load instruction covers whole 128-byte lines: lane l of a group reads
// columns 8l..8l+7 and 64+8l..64+8l+7 (16-bit input; fp32: 4l.., 32+4l.., 64+4l.., 96+4l..). The
// path is held to few instructions per byte, because at memory speed an SM has ~23 clocks per
// group: the group's amax on packed pairs (max.NaN.bf16x2 / .f16x2 on the raw bits), one shuffle
// tree over 8 lanes instead of 16, and the exact division's fast/slow choice made once per group
// (bench/NOTES.md: 0.63-0.68 -> 0.93-0.99 of a same-bytes stream kernel). The division
// by the scale is exact without a divide per value (div_scale). Otherwise one warp per
// (row, group), 4 values per lane, element-wise with bounds checks (K tails, odd strides).
#include "common/types.cuh"
#include "common/quant.cuh"

namespace fp8gemm {

namespace quant {
constexpr uint32_t kLanesPerGroup = 8;
constexpr uint32_t kValsPerLane = kGroup / kLanesPerGroup;          // 16

/// |a| and |b| packed max with NaN winning, on two 16-bit floats per word (kInType 0 bf16, 1 fp16).
template <int kInType>
__device__ __forceinline__ uint32_t abs_max_nan_x2(uint32_t a, uint32_t b) {
    uint32_t r;
    if constexpr (kInType == 0) {
        asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a & 0x7FFF7FFFu), "r"(b & 0x7FFF7FFFu));
    } else {
        asm("max.NaN.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a & 0x7FFF7FFFu), "r"(b & 0x7FFF7FFFu));
    }
    return r;
}

/// One group's 16 values of this lane: the raw words of its 16-byte loads.
template <int kInType>
struct LaneSlice {
    static constexpr int kLoadsPerLane = kInType == 2 ? 4 : 2;
    static constexpr int kColsPerLoad = kInType == 2 ? 4 : 8;       // columns one 16-byte load holds
    uint4 raw[kLoadsPerLane];

    /// Column of the first value of load i, inside the group.
    __device__ __forceinline__ static uint32_t col(int i, uint32_t sl) {
        return i * (kGroup / kLoadsPerLane) + sl * kColsPerLoad;
    }
    __device__ __forceinline__ void load(const void* x, int64_t base, uint32_t sl) {
#pragma unroll
        for (int i = 0; i < kLoadsPerLane; ++i) {
            const int64_t e = base + col(i, sl);
            raw[i] = kInType == 2 ? __ldg(reinterpret_cast<const uint4*>(static_cast<const float*>(x) + e))
                                  : __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x) + e));
        }
    }
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int i = 0; i < kLoadsPerLane; ++i) raw[i] = make_uint4(0, 0, 0, 0);
    }
    __device__ __forceinline__ uint32_t word(int w) const {
        const uint4& t = raw[w / 4];
        return (w % 4 == 0) ? t.x : (w % 4 == 1) ? t.y : (w % 4 == 2) ? t.z : t.w;
    }
    /// The lane's amax over its 16 values (NaN wins).
    __device__ __forceinline__ float amax() const {
        if constexpr (kInType == 2) {
            float m = 0.0f;
#pragma unroll
            for (int w = 0; w < 16; ++w) m = nan_max(m, fabsf(__uint_as_float(word(w))));
            return m;
        } else {
            uint32_t m = word(0) & 0x7FFF7FFFu;
#pragma unroll
            for (int w = 1; w < 8; ++w) m = abs_max_nan_x2<kInType>(m, word(w));
            return nan_max(from_bits16<kInType>(static_cast<uint16_t>(m & 0xFFFFu)),
                           from_bits16<kInType>(static_cast<uint16_t>(m >> 16)));
        }
    }
    /// Value v (0..15) as a float, exactly; values 4j..4j+3 come from word(2j), word(2j+1) (16-bit)
    /// or word(4j..4j+3) (fp32).
    __device__ __forceinline__ float value(int v) const {
        if constexpr (kInType == 2) {
            return __uint_as_float(word(v));
        } else {
            const uint32_t w = word(v / 2);
            return from_bits16<kInType>(static_cast<uint16_t>(v % 2 ? w >> 16 : w & 0xFFFFu));
        }
    }
};
}  // namespace quant

// kLoads = 0: the element path; > 0: the vector path with 4 * kLoads groups per warp
// (quantize.py launches 1: 2 measured no faster).
template <int kInType, int kLoads>
__global__ void __launch_bounds__(256)
quantize_per_token_group_kernel(const void* __restrict__ x, int64_t ldx,      // [rows, k], ldx elements
                                uint8_t* __restrict__ q,                       // [rows, k] compact
                                float* __restrict__ scale,                     // [rows, groups] (see scale_ld)
                                uint32_t rows, uint32_t k, float eps,
                                uint32_t scale_ld) {                           // 0: compact row-major; else M-major
    using namespace quant;
    const uint32_t groups = (k + kGroup - 1) / kGroup;
    if constexpr (kLoads > 0) {
        using Slice = LaneSlice<kInType>;
        constexpr uint32_t kGroupsPerWarp = 4 * kLoads;    // quantize.py: warps = ceil(groups / this)
        const uint64_t total = static_cast<uint64_t>(rows) * groups;
        const uint64_t warp = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
        const uint32_t lane = threadIdx.x % 32;
        const uint32_t sub = lane / kLanesPerGroup, sl = lane % kLanesPerGroup;
        Slice slice[kLoads];
        uint64_t gi[kLoads];
        uint32_t grow[kLoads], gcol[kLoads];             // the group's row and index in its row
#pragma unroll
        for (uint32_t j = 0; j < kLoads; ++j) {       // every load first
            gi[j] = warp * kGroupsPerWarp + 4 * j + sub;
            grow[j] = static_cast<uint32_t>(gi[j] / groups);
            gcol[j] = static_cast<uint32_t>(gi[j] % groups);
            if (gi[j] < total) {
                slice[j].load(x, static_cast<int64_t>(grow[j]) * ldx + static_cast<int64_t>(gcol[j]) * kGroup, sl);
            } else {
                slice[j].zero();
            }
        }
#pragma unroll
        for (uint32_t j = 0; j < kLoads; ++j) {
            float amax = slice[j].amax();
#pragma unroll
            for (uint32_t off = kLanesPerGroup / 2; off > 0; off >>= 1)        // within the group's lanes
                amax = nan_max(amax, __shfl_xor_sync(0xffffffffu, amax, off));
            const float s = __fdiv_rn(nan_max(amax, eps), kFp8Max);
            const float rcp = __frcp_rn(s);
            float y[kValsPerLane];
            if (div_scale_fast(s)) {                   // one choice per group, not per value
#pragma unroll
                for (int v = 0; v < static_cast<int>(kValsPerLane); ++v) y[v] = div_scale(slice[j].value(v), s, rcp, true);
            } else {
#pragma unroll
                for (int v = 0; v < static_cast<int>(kValsPerLane); ++v) y[v] = __fdiv_rn(slice[j].value(v), s);
            }
            if (gi[j] < total) {
                // q is compact [rows, k] and k % 128 == 0: group gi starts at byte gi * 128.
                uint8_t* qg = q + gi[j] * kGroup;
                constexpr int kPerLoad = Slice::kColsPerLoad;
#pragma unroll
                for (int i = 0; i < Slice::kLoadsPerLane; ++i) {
                    const float* yi = y + i * kPerLoad;
                    const uint32_t lo = static_cast<uint32_t>(to_e4m3x2(yi[0], yi[1])) |
                                        (static_cast<uint32_t>(to_e4m3x2(yi[2], yi[3])) << 16);
                    if constexpr (kPerLoad == 8) {
                        const uint32_t hi = static_cast<uint32_t>(to_e4m3x2(yi[4], yi[5])) |
                                            (static_cast<uint32_t>(to_e4m3x2(yi[6], yi[7])) << 16);
                        *reinterpret_cast<uint2*>(qg + Slice::col(i, sl)) = make_uint2(lo, hi);
                    } else {
                        *reinterpret_cast<uint32_t*>(qg + Slice::col(i, sl)) = lo;
                    }
                }
                if (sl == 0) scale[scale_ld ? static_cast<int64_t>(gcol[j]) * scale_ld + grow[j] : gi[j]] = s;
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
    if (lane == 0) scale[scale_ld ? static_cast<int64_t>(g) * scale_ld + row : static_cast<int64_t>(row) * groups + g] = s;
}

}  // namespace fp8gemm
