// swiglu_epilogue.cuh: the MoE L1 epilogue of the general kernel's fused mode (kSwiGLU): SwiGLU
// with DeepSeek-V4's clamp, then FP8 requantization per 1 x 128 group, straight from the
// accumulators, so the [P, 2I] intermediate never reaches global memory.
//
// The tile: 128 token rows x 64 gate columns + the 64 up columns that pair with them (the
// producer loads B's gate rows n .. n+63 and up rows I+n .. I+n+63 into one 128-row stage), so
// accumulator column c < 64 is gate and c + 64 its up. A quantization group is 128 act columns:
// one work unit runs two such sub-tiles back to back (sub 0: act columns 128p .. 128p+63, sub 1:
// the next 64), holding sub 0's act values in shared memory until sub 1 knows the group's amax.
// Each thread owns the same two rows in both sub-tiles, so it keeps its own rows' amax (in shared
// memory beside the values). The arithmetic is moe_glue.cu's kSwiGLU, operation for operation
// (quant::swiglu_clamped, then the same amax and division: same FP32 inputs -> the same FP8 codes
// and scales as the unfused path).
#pragma once
#include "common/types.cuh"
#include "common/quant.cuh"

namespace fp8gemm {

namespace swiglu {
constexpr uint32_t kSubTiles = 2;            // 64 act columns each: one 128-column group
constexpr uint32_t kActCols = 64;
}  // namespace swiglu

/// One warpgroup's sub-tile. ``total``: the 64 x 128 fragments (layout of ptx/wgmma_fp8.cuh),
/// columns 0..63 gate, 64..127 up. ``hold``: this warpgroup's [34][128] floats of shared memory
/// (value i of thread t at hold[i * 128 + t]): sub 0 leaves its 32 act values there and, as
/// values 32 and 33, the amax of the thread's rows row0 and row0 + 8 (kept out of registers,
/// which the mainloop needs between the sub-tiles). Sub 1 stores both sub-tiles' FP8 codes at
/// act[row][col0 ..] (col0 = the group's first column + 2 * (lane % 4)) and the rows' scales at
/// act_scale[row * scale_cols + group]; rows at or past row_limit store nothing.
template <int kNumAccum>
__device__ __forceinline__ void swiglu_quant_epilogue(const float (&total)[kNumAccum], uint32_t sub, float* hold,
                                                      uint32_t tid_in_wg, float limit,
                                                      uint8_t* act, int64_t ld_act, float* act_scale,
                                                      uint32_t scale_cols, uint32_t group, uint32_t row0,
                                                      uint32_t row_limit, uint32_t col0) {
    using namespace quant;
    constexpr int kHalf = kNumAccum / 2;     // the gate fragments; up = gate + kHalf
    static_assert(kHalf == static_cast<int>(swiglu::kActCols) / 2, "a 64 x (64 gate + 64 up) fragment set");
    float v[kHalf];
    float m0 = 0.0f, m1 = 0.0f;
#pragma unroll
    for (int i = 0; i < kHalf; ++i) {
        v[i] = swiglu_clamped(total[i], total[i + kHalf], limit);
        if ((i >> 1) & 1) m1 = nan_max(m1, fabsf(v[i]));
        else m0 = nan_max(m0, fabsf(v[i]));
    }
    // A row's 64 columns sit in the 4 lanes of a quad.
#pragma unroll
    for (uint32_t off = 1; off < 4; off <<= 1) {
        m0 = nan_max(m0, __shfl_xor_sync(0xffffffffu, m0, off));
        m1 = nan_max(m1, __shfl_xor_sync(0xffffffffu, m1, off));
    }
    if (sub == 0) {
#pragma unroll
        for (int i = 0; i < kHalf; ++i) hold[i * kWarpgroupThreads + tid_in_wg] = v[i];
        hold[kHalf * kWarpgroupThreads + tid_in_wg] = m0;
        hold[(kHalf + 1) * kWarpgroupThreads + tid_in_wg] = m1;
        return;
    }
    const float amax0 = nan_max(hold[kHalf * kWarpgroupThreads + tid_in_wg], m0);
    const float amax1 = nan_max(hold[(kHalf + 1) * kWarpgroupThreads + tid_in_wg], m1);
    const float s0 = __fdiv_rn(nan_max(amax0, 1e-10f), kFp8Max);
    const float s1 = __fdiv_rn(nan_max(amax1, 1e-10f), kFp8Max);
    const float rcp0 = __frcp_rn(s0), rcp1 = __frcp_rn(s1);
    const bool fast0 = div_scale_fast(s0), fast1 = div_scale_fast(s1);
    const uint32_t row1 = row0 + 8;
    // Sub-tile 1's columns first: its values leave registers as they are stored.
#pragma unroll
    for (int h = static_cast<int>(swiglu::kSubTiles) - 1; h >= 0; --h) {
        const uint32_t half = static_cast<uint32_t>(h);
#pragma unroll
        for (int j = 0; j < kHalf / 4; ++j) {
            float w[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) w[e] = half == 0 ? hold[(4 * j + e) * kWarpgroupThreads + tid_in_wg] : v[4 * j + e];
            const uint32_t col = col0 + half * swiglu::kActCols + 8 * j;
            if (row0 < row_limit)
                *reinterpret_cast<uint16_t*>(act + static_cast<int64_t>(row0) * ld_act + col) =
                    to_e4m3x2(div_scale(w[0], s0, rcp0, fast0), div_scale(w[1], s0, rcp0, fast0));
            if (row1 < row_limit)
                *reinterpret_cast<uint16_t*>(act + static_cast<int64_t>(row1) * ld_act + col) =
                    to_e4m3x2(div_scale(w[2], s1, rcp1, fast1), div_scale(w[3], s1, rcp1, fast1));
        }
    }
    if ((tid_in_wg % 4) == 0) {
        if (row0 < row_limit) act_scale[static_cast<int64_t>(row0) * scale_cols + group] = s0;
        if (row1 < row_limit) act_scale[static_cast<int64_t>(row1) * scale_cols + group] = s1;
    }
}

}  // namespace fp8gemm
