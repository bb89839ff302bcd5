// split_k.cuh: the deterministic in-kernel split-K reduction of the general and swap-AB kernels:
//   split_k_publish(...); if (*last_split_flag == 0) continue; split_k_sum(...);
//
// Each of a tile's S splits writes its FP32 partial to the workspace; the last split to finish
// (an atomic counter per tile) sums all partials in split order 0..S-1, so the result is bitwise
// reproducible whichever split finishes last. It then resets the counter to 0, so the workspace
// needs zeroing only once (fp8gemm/launcher.py, split_workspace).
#pragma once
#include "common/types.cuh"
#include "ptx/sync.cuh"

namespace fp8gemm {

/// For every consumer thread of a CTA (kConsumerThreads of them, synchronized on named barrier
/// ``barrier``): publish this split's partial ``total`` of tile ``tile_idx`` into workspace slot
/// ``ws_slot + split_idx`` (WorkUnit: the tile's partials lie in consecutive slots) and count the
/// split in; afterwards ``*last_split_flag`` says whether this CTA ran the tile's last split (then
/// split_k_sum gathers the tile). ``has_rows``: whether any of this thread's values is ever stored
/// (a thread that holds none skips the workspace entirely: swap-AB at M = 1, 64 of 256 threads).
/// Workspace layout [tile][split][j][consumer thread][4]: coalesced float4 per j.
template <uint32_t kTileFloats, uint32_t kConsumerThreads, int kNumAccum>
__device__ __forceinline__ void split_k_publish(const float (&total)[kNumAccum], float* workspace,
                                                uint32_t* tile_counters, uint32_t tile_idx, uint32_t ws_slot,
                                                uint32_t split_idx, uint32_t num_splits, bool has_rows,
                                                uint32_t consumer_tid, volatile uint32_t* last_split_flag,
                                                uint32_t barrier) {
    float* mine = workspace + (static_cast<int64_t>(ws_slot) + split_idx) * kTileFloats;
    if (has_rows) {
#pragma unroll
        for (int j = 0; j < kNumAccum / 4; ++j) {
            const float v[4] = {total[4 * j], total[4 * j + 1], total[4 * j + 2], total[4 * j + 3]};
            st_cg_f32x4(mine + (j * kConsumerThreads + consumer_tid) * 4, v);
        }
    }
    // NOTES: no per-thread fence. The barrier orders every consumer thread's stores before
    // thread 0's acq_rel add (a release is cumulative), and the next barrier orders that add's
    // acquire before every thread's loads of the other partials (the pattern of CUTLASS's split-K
    // semaphore). The two __threadfence() it replaces cost ~0.5 us of a 5 us decode GEMM
    // (bench/NOTES.md, "split-K without fences").
    named_barrier_sync(barrier, kConsumerThreads);
    if (consumer_tid == 0) {
        const uint32_t done = atomic_add_acq_rel_gpu(&tile_counters[tile_idx], 1u);
        const uint32_t last = (done == num_splits - 1) ? 1u : 0u;
        if (last) tile_counters[tile_idx] = 0;        // ready for the next launch
        *last_split_flag = last;
    }
    named_barrier_sync(barrier, kConsumerThreads);
}

/// For every consumer thread of the CTA that ran a tile's last split: ``total`` = the sum of the
/// tile's partials (slots ws_slot ..), in split order.
template <uint32_t kTileFloats, uint32_t kConsumerThreads, int kNumAccum>
__device__ __forceinline__ void split_k_sum(float (&total)[kNumAccum], const float* workspace, uint32_t ws_slot,
                                            uint32_t num_splits, bool has_rows, uint32_t consumer_tid) {
    const float* tile_ws = workspace + static_cast<int64_t>(ws_slot) * kTileFloats;
#pragma unroll
    for (int i = 0; i < kNumAccum; ++i) total[i] = 0.0f;
    // The splits' partials in chunks of kChunk: every (predicated) load of a chunk is issued before
    // its adds, so one L2 round trip serves kChunk splits (a small tile's reduction is
    // latency-bound); the adds stay in split order 0..S-1, so the sum is deterministic.
    const float4* part = reinterpret_cast<const float4*>(tile_ws) + consumer_tid;
    constexpr uint32_t kFloat4PerSplit = kTileFloats / 4;
    constexpr uint32_t kF4 = kNumAccum / 4;                   // float4 per thread per split
    constexpr uint32_t kChunk = kF4 >= 16 ? 1 : 16 / kF4;     // 16 float4 in flight
    for (uint32_t s0 = 0; has_rows && s0 < num_splits; s0 += kChunk) {
        float4 v[kChunk][kF4];
#pragma unroll
        for (uint32_t c = 0; c < kChunk; ++c) {
#pragma unroll
            for (uint32_t j = 0; j < kF4; ++j)
                v[c][j] = s0 + c < num_splits ? __ldcg(part + (s0 + c) * kFloat4PerSplit + j * kConsumerThreads)
                                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (uint32_t c = 0; c < kChunk; ++c) {
            if (s0 + c >= num_splits) break;
#pragma unroll
            for (uint32_t j = 0; j < kF4; ++j) {
                total[4 * j] += v[c][j].x;
                total[4 * j + 1] += v[c][j].y;
                total[4 * j + 2] += v[c][j].z;
                total[4 * j + 3] += v[c][j].w;
            }
        }
    }
}

}  // namespace fp8gemm
