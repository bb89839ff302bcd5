// common/types.cuh: fixed-width types, the TMA descriptor, hardware facts and output conversions.
//
// NOTES: NVRTC has no standard headers by default, so the few types we need are declared here;
// the hardware facts mirror fp8gemm/hw.py (one place each side).
#pragma once

namespace fp8gemm {

typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;

/// A CUtensorMap: 128 opaque bytes, 64-byte aligned, passed by value as a __grid_constant__.
struct alignas(64) TmaDescriptor {
    uint64_t opaque[16];
};

/// Hardware facts (SM90), mirrored in fp8gemm/hw.py.
constexpr uint32_t kMaxSmemPerBlock = 232448;  // opt-in dynamic shared memory per block, bytes
constexpr uint32_t kWgmmaM = 64;               // rows of one wgmma (per warpgroup)
constexpr uint32_t kWgmmaKFp8 = 32;            // K of one FP8 wgmma, elements == bytes
constexpr uint32_t kWarpgroupThreads = 128;
constexpr uint32_t kSwizzleBytes = 128;        // TMA / wgmma 128B swizzle row width
constexpr uint32_t kScaleBlock = 128;          // block-scaling granularity along K (and N for B)

/// Output element types, selected by a template tag.
enum class OutType : int { kBF16 = 0, kFP16 = 1, kFP32 = 2 };

/// Store one float as the output type (round to nearest even).
template <OutType kOut>
__device__ __forceinline__ void store_out(void* base, int64_t offset, float v) {
    if constexpr (kOut == OutType::kFP32) {
        static_cast<float*>(base)[offset] = v;
    } else if constexpr (kOut == OutType::kBF16) {
        uint16_t h;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(v));
        static_cast<uint16_t*>(base)[offset] = h;
    } else {
        uint16_t h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
        static_cast<uint16_t*>(base)[offset] = h;
    }
}

/// Store two adjacent floats (offset even, both in bounds, base aligned to two elements).
template <OutType kOut>
__device__ __forceinline__ void store_out2(void* base, int64_t offset, float v0, float v1) {
    if constexpr (kOut == OutType::kFP32) {
        struct alignas(8) F2 { float x, y; };
        *reinterpret_cast<F2*>(static_cast<float*>(base) + offset) = F2{v0, v1};
    } else if constexpr (kOut == OutType::kBF16) {
        uint32_t h;
        asm("cvt.rn.bf16x2.f32 %0, %2, %1;" : "=r"(h) : "f"(v0), "f"(v1));
        *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(base) + offset) = h;
    } else {
        uint32_t h;
        asm("cvt.rn.f16x2.f32 %0, %2, %1;" : "=r"(h) : "f"(v0), "f"(v1));
        *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(base) + offset) = h;
    }
}

}  // namespace fp8gemm
