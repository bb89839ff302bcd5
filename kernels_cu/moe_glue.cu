// moe_glue.cu: the small kernels around the two grouped GEMMs of an MoE layer (fp8gemm/moe.py).
//
// One template, one op per instantiation, one shared argument list (unused arguments are 0):
//   kRoute    counts[e] = pairs routed to expert e, offsets = their exclusive prefix, fill = 0
//             (one block: counted with shared-memory atomics, then a block scan; replaces a
//             memset, a count kernel and a scan kernel: 3 device ops -> 1). With dst: also the
//             choice, per expert, between the grouped GEMM's two kernels from its count
//             (choice_costs below): dst = int32 [2][E + 1], row 0 the offsets for the
//             two-warpgroup kernel, row 1 for the three-warpgroup one; each expert's rows are a
//             range in one row and empty in the other (a launch with every group empty exits
//             after scanning them), and offsets follow the same layout.
//   kScatter  every (token, slot) pair takes the next row of its expert's range (atomic), and its
//             token's FP8 row and scales are copied there     (one warp per pair)
//   kSwiGLU   h [rows, 2I] fp32 -> silu(min(gate, limit)) * clip(up, -limit, limit), quantized per
//             1 x 128 group to FP8 + scale exactly as fp8gemm.reference does (common/quant.cuh)
//   kCombine  out[t] = sum over slots j = 0..k-1 in order of weight[t, j] * y[row of (t, j)] (fp32
//             sum, bf16 out)                                  (one block per token)
// Determinism: the atomics decide which row of its expert's range a pair gets, so the order of
// rows inside an expert varies from run to run; every row's GEMM result depends on its own
// inputs only, and the combine reads rows by pair in slot order, so the output is bitwise
// reproducible. Pairs whose expert id lies outside 0..E-1 are dropped (row -1, weight unused).
#include "common/types.cuh"
#include "common/quant.cuh"

namespace fp8gemm {

namespace moe {
enum Op : int { kRoute = 0, kScatter = 1, kSwiGLU = 2, kCombine = 3 };
constexpr uint32_t kScanThreads = 1024;
constexpr uint32_t kMaxExperts = 8192;      // fp8gemm.validate.MAX_GROUPS: counts live in shared memory
}  // namespace moe

/// The grouped GEMM's cost of an expert with c rows, in units of one 128-row tile of the
/// two-warpgroup kernel (bench/NOTES.md, fitted to lab/exp_moe_prefill.py --wg3 on
/// V4-Flash and V4-Pro L1): .x 128-row tiles, the last partial one of several at 0.75 (c = 129:
/// 1.69-1.72 measured); .y 192-row tiles at 1.55 each, a group of one at 1.06 up to 128 rows (a
/// warpgroup skips) and 1.45 up to 192 (1.34-1.65 measured).
__device__ __forceinline__ float2 choice_costs(int32_t c) {
    if (c <= 0) return make_float2(0.0f, 0.0f);
    const int32_t full = c / 128, rem = c % 128;
    const float two = static_cast<float>(full) + (rem == 0 ? 0.0f : (full > 0 ? 0.75f : 1.0f));
    const float three = c <= 128 ? 1.06f : c <= 192 ? 1.45f : 1.55f * static_cast<float>((c + 191) / 192);
    return make_float2(two, three);
}

template <int kOp>
__global__ void __launch_bounds__(kOp == moe::kRoute ? moe::kScanThreads : 256)
moe_glue_kernel(const int32_t* __restrict__ ids,       // [pairs] expert of each (token, slot), token-major
                const float* __restrict__ weights,     // [pairs] combine weights
                uint32_t pairs, uint32_t top_k, uint32_t num_experts,
                int32_t* __restrict__ counts,          // [E]
                int32_t* __restrict__ offsets,         // [E + 1]
                int32_t* __restrict__ fill,            // [E] rows handed out so far
                int32_t* __restrict__ pair_row,        // [pairs] row of each pair in expert order (-1: dropped)
                const void* __restrict__ src, const float* __restrict__ src_scale,
                void* __restrict__ dst, float* __restrict__ dst_scale,
                uint32_t rows, uint32_t cols, float limit) {
    using namespace moe;
    const uint32_t lane = threadIdx.x % 32;
    if constexpr (kOp == kRoute) {
        // Count in shared memory, then each thread sums a run of experts, a block scan of the run
        // totals, then the runs. num_experts <= kMaxExperts (moe_layer.py checks E).
        __shared__ int32_t sh_counts[kMaxExperts];
        __shared__ int32_t totals[kScanThreads];
        for (uint32_t e = threadIdx.x; e < num_experts; e += blockDim.x) sh_counts[e] = 0;
        __syncthreads();
        for (uint32_t p = threadIdx.x; p < pairs; p += blockDim.x) {
            const int32_t e = ids[p];
            if (e >= 0 && static_cast<uint32_t>(e) < num_experts) atomicAdd(&sh_counts[e], 1);
        }
        __syncthreads();
        const uint32_t per = (num_experts + kScanThreads - 1) / kScanThreads;
        const uint32_t e0 = threadIdx.x * per;
        int32_t sum = 0;
        for (uint32_t e = e0; e < min(e0 + per, num_experts); ++e) sum += sh_counts[e];
        totals[threadIdx.x] = sum;
        __syncthreads();
        for (uint32_t d = 1; d < kScanThreads; d <<= 1) {          // inclusive Hillis-Steele
            const int32_t v = threadIdx.x >= d ? totals[threadIdx.x - d] : 0;
            __syncthreads();
            totals[threadIdx.x] += v;
            __syncthreads();
        }
        int32_t run = totals[threadIdx.x] - sum;                   // exclusive
        for (uint32_t e = e0; e < min(e0 + per, num_experts); ++e) {
            const int32_t c = sh_counts[e];
            counts[e] = c;
            offsets[e] = run;
            run += c;
            fill[e] = 0;
        }
        if (threadIdx.x == kScanThreads - 1) offsets[num_experts] = totals[kScanThreads - 1];
        if (dst != nullptr) {
            // Each expert goes to the kernel of lower cost for its own count (choice_costs; ties:
            // the two-warpgroup one). Rows are laid out with the two-warpgroup kernel's experts
            // first, then the three-warpgroup kernel's, each in expert order, so that each kernel's
            // groups are one contiguous run of rows: its row of dst holds their offsets and an empty
            // range at every expert of the other kernel. offsets (where the scatter puts each
            // expert's rows) is rewritten in that order; offsets[E] stays the total.
            __shared__ int32_t totals3[kScanThreads];             // run sums of three-warpgroup experts
            const auto three_of = [](int32_t c) { const float2 k = choice_costs(c); return k.y < k.x; };
            int32_t sum3 = 0;
            for (uint32_t e = e0; e < min(e0 + per, num_experts); ++e)
                if (three_of(sh_counts[e])) sum3 += sh_counts[e];
            totals3[threadIdx.x] = sum3;
            __syncthreads();
            for (uint32_t d = 1; d < kScanThreads; d <<= 1) {      // inclusive Hillis-Steele
                const int32_t v = threadIdx.x >= d ? totals3[threadIdx.x - d] : 0;
                __syncthreads();
                totals3[threadIdx.x] += v;
                __syncthreads();
            }
            const int32_t all = totals[kScanThreads - 1];
            const int32_t all2 = all - totals3[kScanThreads - 1];  // rows of two-warpgroup experts
            int32_t run3 = totals3[threadIdx.x] - sum3;            // exclusive, per class
            int32_t run2 = (totals[threadIdx.x] - sum) - run3;
            int32_t* rows2 = static_cast<int32_t*>(dst);          // [2][E + 1]
            for (uint32_t e = e0; e < min(e0 + per, num_experts); ++e) {
                const int32_t c = sh_counts[e];
                const bool three = three_of(c);
                rows2[e] = run2;
                rows2[num_experts + 1 + e] = all2 + run3;
                offsets[e] = three ? all2 + run3 : run2;
                if (three) run3 += c;
                else run2 += c;
            }
            if (threadIdx.x == kScanThreads - 1) {
                rows2[num_experts] = all2;
                rows2[2 * num_experts + 1] = all;
            }
        }
    } else if constexpr (kOp == kScatter) {
        // src: tokens [T, cols] FP8 bytes (cols % 16 == 0) and scales [T, ceil(cols/128)].
        const uint32_t warps = gridDim.x * blockDim.x / 32;
        const uint32_t groups = (cols + 127) / 128;
        for (uint32_t p = (blockIdx.x * blockDim.x + threadIdx.x) / 32; p < pairs; p += warps) {
            int32_t row = -1;
            if (lane == 0) {
                const int32_t e = ids[p];
                if (e >= 0 && static_cast<uint32_t>(e) < num_experts) row = offsets[e] + atomicAdd(&fill[e], 1);
                pair_row[p] = row;
            }
            row = __shfl_sync(0xffffffffu, row, 0);
            if (row < 0) continue;
            const uint32_t t = p / top_k;
            const uint4* from = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(src) + static_cast<int64_t>(t) * cols);
            uint4* to = reinterpret_cast<uint4*>(static_cast<uint8_t*>(dst) + static_cast<int64_t>(row) * cols);
            for (uint32_t i = lane; i < cols / 16; i += 32) to[i] = from[i];
            for (uint32_t g = lane; g < groups; g += 32)
                dst_scale[static_cast<int64_t>(row) * groups + g] = src_scale[static_cast<int64_t>(t) * groups + g];
        }
    } else if constexpr (kOp == kSwiGLU) {
        // src: h [rows, 2 * cols] fp32 (gate | up); dst: [rows, cols] FP8; one warp per (row, group).
        using namespace quant;
        // Rows from offsets[E] on belong to dropped pairs: never written by L1, never used.
        const uint32_t live = min(rows, static_cast<uint32_t>(max(offsets[num_experts], 0)));
        const uint32_t groups = cols / kGroup;
        const uint64_t warp = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
        if (warp >= static_cast<uint64_t>(live) * groups) return;
        const uint32_t row = static_cast<uint32_t>(warp / groups);
        const uint32_t g = static_cast<uint32_t>(warp % groups);
        const float* h = static_cast<const float*>(src) + static_cast<int64_t>(row) * 2 * cols;
        const uint32_t c0 = g * kGroup + lane * kPerLane;
        const float4 gate = *reinterpret_cast<const float4*>(h + c0);
        const float4 up = *reinterpret_cast<const float4*>(h + cols + c0);
        const float gv[kPerLane] = {gate.x, gate.y, gate.z, gate.w};
        const float uv[kPerLane] = {up.x, up.y, up.z, up.w};
        float v[kPerLane];
        float amax = 0.0f;
#pragma unroll
        for (uint32_t i = 0; i < kPerLane; ++i) {
            v[i] = swiglu_clamped(gv[i], uv[i], limit);
            amax = nan_max(amax, fabsf(v[i]));
        }
#pragma unroll
        for (uint32_t off = 16; off > 0; off >>= 1) amax = nan_max(amax, __shfl_xor_sync(0xffffffffu, amax, off));
        const float s = __fdiv_rn(nan_max(amax, 1e-10f), kFp8Max);
        const float rcp = __frcp_rn(s);
        const bool fast = div_scale_fast(s);
        const uint16_t lo = to_e4m3x2(div_scale(v[0], s, rcp, fast), div_scale(v[1], s, rcp, fast));
        const uint16_t hi = to_e4m3x2(div_scale(v[2], s, rcp, fast), div_scale(v[3], s, rcp, fast));
        *reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(dst) + static_cast<int64_t>(row) * cols + c0) =
            static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
        if (lane == 0) dst_scale[static_cast<int64_t>(row) * groups + g] = s;
    } else {
        // src: y [rows of pairs, cols] bf16; dst: out [T, cols] bf16 (cols % 8 == 0); block t.
        const uint32_t t = blockIdx.x;
        const uint16_t* y = static_cast<const uint16_t*>(src);
        for (uint32_t c = threadIdx.x * 8; c < cols; c += blockDim.x * 8) {
            float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
            for (uint32_t j = 0; j < top_k; ++j) {               // slot order: deterministic
                const uint32_t p = t * top_k + j;
                const int32_t row = pair_row[p];
                if (row < 0) continue;
                const float w = weights[p];
                const uint4 v = *reinterpret_cast<const uint4*>(y + static_cast<int64_t>(row) * cols + c);
                const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    acc[2 * i] = fmaf(w, __uint_as_float(words[i] << 16), acc[2 * i]);
                    acc[2 * i + 1] = fmaf(w, __uint_as_float(words[i] & 0xFFFF0000u), acc[2 * i + 1]);
                }
            }
            uint32_t packed[4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
                asm("cvt.rn.bf16x2.f32 %0, %2, %1;" : "=r"(packed[i]) : "f"(acc[2 * i]), "f"(acc[2 * i + 1]));
            *reinterpret_cast<uint4*>(static_cast<uint16_t*>(dst) + static_cast<int64_t>(t) * cols + c) =
                make_uint4(packed[0], packed[1], packed[2], packed[3]);
        }
    }
}

}  // namespace fp8gemm
