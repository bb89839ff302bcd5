"""Experiment (issue 6): variants of the activation quantizer's vector path against the shipped kernel
and a pure stream kernel (same bytes: read 2 B, write 1 B per value, no arithmetic) as the ceiling.
CUPTI, L2 cold (bench.timing), median of 20; every variant is checked bit for bit against the
shipped kernel. Usage: python lab/quant_exp.py"""
import os

import cupy
import torch

import fp8gemm
from fp8gemm.bench.timing import L2Flush, time_calls

INC = os.path.join(os.path.dirname(fp8gemm.__file__), "kernels_cu")
if not os.path.isdir(INC):
    INC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels_cu")
SRC = r"""
#include "common/quant.cuh"
namespace fp8gemm {
using namespace quant;

// Ceiling: read 16 B of bf16, write their 8 high bytes; grid-stride.
extern "C" __global__ void __launch_bounds__(256) stream_kernel(const uint4* __restrict__ x, uint2* __restrict__ q, unsigned long long n16) {
    for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n16; i += gridDim.x * 256ull) {
        const uint4 t = __ldg(x + i);
        q[i] = make_uint2(__byte_perm(t.x, t.y, 0x7531), __byte_perm(t.z, t.w, 0x7531));
    }
}

template <int kLoads, bool kContig>
__device__ __forceinline__ void load_batch(const uint16_t* x, int64_t ldx, uint32_t groups, uint64_t total,
                                           uint64_t b, uint32_t half, uint32_t hl, uint4 (&raw)[kLoads]) {
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
        const uint64_t gi = b * (2 * kLoads) + 2 * j + half;
        if (gi < total) {
            const int64_t off = kContig ? static_cast<int64_t>(gi) * kGroup + hl * 8
                : static_cast<int64_t>(gi / groups) * ldx + static_cast<int64_t>(gi % groups) * kGroup + hl * 8;
            raw[j] = __ldg(reinterpret_cast<const uint4*>(x + off));
        } else {
            raw[j] = make_uint4(0, 0, 0, 0);
        }
    }
}

template <int kLoads>
__device__ __forceinline__ void process(uint8_t* q, float* scale, uint64_t total, uint64_t b, uint32_t half,
                                        uint32_t hl, float eps, const uint4 (&raw)[kLoads]) {
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
        const uint64_t gi = b * (2 * kLoads) + 2 * j + half;
        float v[8];
        const uint32_t w[4] = {raw[j].x, raw[j].y, raw[j].z, raw[j].w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            v[2 * i] = from_bits16<0>(static_cast<uint16_t>(w[i] & 0xFFFFu));
            v[2 * i + 1] = from_bits16<0>(static_cast<uint16_t>(w[i] >> 16));
        }
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) amax = nan_max(amax, fabsf(v[i]));
#pragma unroll
        for (uint32_t off = 8; off > 0; off >>= 1) amax = nan_max(amax, __shfl_xor_sync(0xffffffffu, amax, off));
        const float s = __fdiv_rn(nan_max(amax, eps), kFp8Max);
        const float rcp = __frcp_rn(s);
        const bool fast = div_scale_fast(s);
        uint32_t packed[2];
#pragma unroll
        for (int p = 0; p < 2; ++p) {
            const uint16_t lo = to_e4m3x2(div_scale(v[4 * p], s, rcp, fast), div_scale(v[4 * p + 1], s, rcp, fast));
            const uint16_t hi = to_e4m3x2(div_scale(v[4 * p + 2], s, rcp, fast), div_scale(v[4 * p + 3], s, rcp, fast));
            packed[p] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
        }
        if (gi < total) {
            *reinterpret_cast<uint2*>(q + gi * kGroup + hl * 8) = make_uint2(packed[0], packed[1]);
            if (hl == 0) scale[gi] = s;
        }
    }
}

// Persistent: each warp walks batches of 2 * kLoads groups with a grid stride; the next batch's
// loads are issued before the current batch is processed.
template <int kLoads, bool kContig>
__device__ void persist(const uint16_t* __restrict__ x, int64_t ldx, uint8_t* __restrict__ q,
                        float* __restrict__ scale, uint32_t rows, uint32_t k, float eps) {
    const uint32_t groups = k / kGroup;
    const uint64_t total = static_cast<uint64_t>(rows) * groups;
    const uint64_t nwarps = static_cast<uint64_t>(gridDim.x) * blockDim.x / 32;
    const uint32_t lane = threadIdx.x % 32, half = lane / 16, hl = lane % 16;
    uint64_t b = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    constexpr uint64_t G = 2 * kLoads;
    if (b * G >= total) return;
    uint4 cur[kLoads], nxt[kLoads];
    load_batch<kLoads, kContig>(x, ldx, groups, total, b, half, hl, cur);
    for (; b * G < total; b += nwarps) {
        const uint64_t bn = b + nwarps;
        if (bn * G < total) load_batch<kLoads, kContig>(x, ldx, groups, total, bn, half, hl, nxt);
        process<kLoads>(q, scale, total, b, half, hl, eps, cur);
#pragma unroll
        for (int j = 0; j < kLoads; ++j) cur[j] = nxt[j];
    }
}

#define P(NAME, L, C) extern "C" __global__ void __launch_bounds__(256) NAME(const uint16_t* x, long long ldx, \
    uint8_t* q, float* s, unsigned rows, unsigned k, float eps) { persist<L, C>(x, ldx, q, s, rows, k, eps); }
P(p1, 1, false) P(p2, 2, false) P(p4, 4, false) P(p1c, 1, true) P(p2c, 2, true) P(p4c, 4, true)

// 8 lanes per group, 16 values per lane (cols sl*8.. and 64+sl*8..: each load instruction covers whole
// 128-byte lines), amax on packed bf16x2 (max.NaN), the exact-division branch hoisted out of the loop.
__device__ __forceinline__ uint32_t max_nan_bf16x2(uint32_t a, uint32_t b) {
    uint32_t r;
    asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}

template <int kLoads, bool kContig>
__device__ __forceinline__ void load8l(const uint16_t* x, int64_t ldx, uint32_t groups, uint64_t total,
                                       uint64_t b, uint32_t sub, uint32_t sl, uint4 (&raw)[kLoads][2]) {
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
        const uint64_t gi = b * (4 * kLoads) + 4 * j + sub;
        if (gi < total) {
            const int64_t off = kContig ? static_cast<int64_t>(gi) * kGroup + sl * 8
                : static_cast<int64_t>(gi / groups) * ldx + static_cast<int64_t>(gi % groups) * kGroup + sl * 8;
            raw[j][0] = __ldg(reinterpret_cast<const uint4*>(x + off));
            raw[j][1] = __ldg(reinterpret_cast<const uint4*>(x + off + 64));
        } else {
            raw[j][0] = raw[j][1] = make_uint4(0, 0, 0, 0);
        }
    }
}

template <int kLoads>
__device__ __forceinline__ void proc8l(uint8_t* q, float* scale, uint64_t total, uint64_t b, uint32_t sub,
                                       uint32_t sl, float eps, const uint4 (&raw)[kLoads][2]) {
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
        const uint64_t gi = b * (4 * kLoads) + 4 * j + sub;
        const uint32_t w[8] = {raw[j][0].x, raw[j][0].y, raw[j][0].z, raw[j][0].w,
                               raw[j][1].x, raw[j][1].y, raw[j][1].z, raw[j][1].w};
        uint32_t m = w[0] & 0x7FFF7FFFu;
#pragma unroll
        for (int i = 1; i < 8; ++i) m = max_nan_bf16x2(m, w[i] & 0x7FFF7FFFu);
        float amax = nan_max(__uint_as_float(m << 16), __uint_as_float(m & 0xFFFF0000u));
#pragma unroll
        for (uint32_t off = 4; off > 0; off >>= 1) amax = nan_max(amax, __shfl_xor_sync(0xffffffffu, amax, off));
        const float s = __fdiv_rn(nan_max(amax, eps), kFp8Max);
        const float rcp = __frcp_rn(s);
        float y[16];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            y[2 * i] = __uint_as_float(w[i] << 16);
            y[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
        }
        if (div_scale_fast(s)) {
#pragma unroll
            for (int i = 0; i < 16; ++i) {
                const float q0 = __fmul_rn(y[i], rcp);
                y[i] = __fmaf_rn(__fmaf_rn(-q0, s, y[i]), rcp, q0);
            }
        } else {
#pragma unroll
            for (int i = 0; i < 16; ++i) y[i] = __fdiv_rn(y[i], s);
        }
        uint32_t packed[4];
#pragma unroll
        for (int p = 0; p < 4; ++p)
            packed[p] = static_cast<uint32_t>(to_e4m3x2(y[4 * p], y[4 * p + 1])) |
                        (static_cast<uint32_t>(to_e4m3x2(y[4 * p + 2], y[4 * p + 3])) << 16);
        if (gi < total) {
            *reinterpret_cast<uint2*>(q + gi * kGroup + sl * 8) = make_uint2(packed[0], packed[1]);
            *reinterpret_cast<uint2*>(q + gi * kGroup + 64 + sl * 8) = make_uint2(packed[2], packed[3]);
            if (sl == 0) scale[gi] = s;
        }
    }
}

template <int kLoads, bool kContig, bool kPersist>
__device__ void v8l(const uint16_t* __restrict__ x, int64_t ldx, uint8_t* __restrict__ q,
                    float* __restrict__ scale, uint32_t rows, uint32_t k, float eps) {
    const uint32_t groups = k / kGroup;
    const uint64_t total = static_cast<uint64_t>(rows) * groups;
    const uint64_t nwarps = static_cast<uint64_t>(gridDim.x) * blockDim.x / 32;
    const uint32_t lane = threadIdx.x % 32, sub = lane / 8, sl = lane % 8;
    uint64_t b = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    constexpr uint64_t G = 4 * kLoads;
    if (b * G >= total) return;
    uint4 cur[kLoads][2];
    load8l<kLoads, kContig>(x, ldx, groups, total, b, sub, sl, cur);
    if constexpr (!kPersist) {
        proc8l<kLoads>(q, scale, total, b, sub, sl, eps, cur);
    } else {
        uint4 nxt[kLoads][2];
        for (; b * G < total; b += nwarps) {
            const uint64_t bn = b + nwarps;
            if (bn * G < total) load8l<kLoads, kContig>(x, ldx, groups, total, bn, sub, sl, nxt);
            proc8l<kLoads>(q, scale, total, b, sub, sl, eps, cur);
#pragma unroll
            for (int j = 0; j < kLoads; ++j) { cur[j][0] = nxt[j][0]; cur[j][1] = nxt[j][1]; }
        }
    }
}
#define V(NAME, L, C, PP) extern "C" __global__ void __launch_bounds__(256) NAME(const uint16_t* x, long long ldx, \
    uint8_t* q, float* s, unsigned rows, unsigned k, float eps) { v8l<L, C, PP>(x, ldx, q, s, rows, k, eps); }
V(e1, 1, false, false) V(e2, 2, false, false) V(e1p, 1, false, true) V(e2p, 2, false, true) V(e1pc, 1, true, true) V(e2pc, 2, true, true)
}  // namespace fp8gemm
"""

SHAPES = [(128, 7168), (4096, 7168), (16384, 4096), (16384, 7168)]


def main():
    mod = cupy.RawModule(code=SRC, options=("-I" + INC, "--std=c++17", "-arch=sm_90a"))
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    flush = L2Flush()
    rows_out = []
    for m, k in SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) * 3
        xc = cupy.from_dlpack(x)
        q_ref, s_ref = fp8gemm.quantize_per_token_group(x)
        torch.cuda.synchronize()
        q_ref = cupy.from_dlpack(q_ref.view(torch.uint8))
        s_ref = cupy.from_dlpack(s_ref)
        fns = {"shipped": lambda x=x: fp8gemm.quantize_per_token_group(x), "clone": x.clone}
        n16 = m * k // 8
        qs = cupy.empty(m * k, dtype=cupy.uint8)
        ks = mod.get_function("stream_kernel")
        fns["stream"] = lambda: ks((sms * 8,), (256,), (xc, qs, cupy.uint64(n16)))
        bad = []
        variants = [(n, b) for n in ("p2c", "e1p", "e2p", "e1pc", "e2pc") for b in (4, 8)]
        variants += [("e1", 0), ("e2", 0)]        # one batch per warp, a grid of every batch
        for name, bps in variants:
            if True:
                f = mod.get_function(name)
                q = cupy.full((m, k), 0x7F, dtype=cupy.uint8)
                s = cupy.full((m, k // 128), cupy.nan, dtype=cupy.float32)
                args = (xc, cupy.int64(k), q, s, cupy.uint32(m), cupy.uint32(k), cupy.float32(1e-10))
                grid = (sms * bps,) if name[:2] != "e1" and name[:2] != "e2" or name.endswith(("p", "pc")) else \
                    (-(-(m * k // 128) // (4 if name == "e1" else 8) * 32 // 256),)
                f(grid, (256,), args)
                cupy.cuda.Device().synchronize()
                ok = bool((q == q_ref).all()) and bool(cupy.array_equal(s, s_ref, equal_nan=True))
                if not ok:
                    bad.append(f"{name}/{bps}")
                fns[f"{name}/{bps}"] = lambda f=f, grid=grid, args=args: f(grid, (256,), args)
        t = time_calls(fns, flush, 20)
        moved = m * k * 3 + m * (k // 128) * 4
        clone_bw = 4 * m * k / t["clone"] / 1e3
        print(f"M={m} K={k}: clone {clone_bw:.0f} GB/s, stream {moved / t['stream'] / 1e3:.0f} GB/s, bad={bad}")
        for name, us in t.items():
            print(f"   {name:10} {us:8.2f} us  {moved / us / 1e3:7.0f} GB/s  {us and t['stream'] / us:.2f} of stream")
        rows_out.append((m, k, t))
    print("\nsummary (fraction of the stream kernel's time):")
    names = list(rows_out[0][2])
    print("shape".ljust(12) + "".join(n.rjust(9) for n in names))
    for m, k, t in rows_out:
        print(f"{m}x{k}".ljust(12) + "".join(f"{t['stream'] / t[n]:9.2f}" for n in names))


if __name__ == "__main__":
    main()
