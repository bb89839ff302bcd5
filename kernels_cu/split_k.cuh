// split_k.cuh: the deterministic in-kernel split-K reduction of the general and swap-AB kernels:
//   if (!split_k_publish(...)) continue; split_k_sum(...);
//
// Each of a tile's S splits writes its FP32 partial to the workspace; the last split to finish
// (an atomic counter per tile) sums all partials in split order 0..S-1, so the result is bitwise
// reproducible whichever split finishes last. It then resets the counter to 0, so the workspace
// needs zeroing only once (fp8gemm/launcher.py, split_workspace).
// NOTES: the last-split decision reaches the CTA's consumer threads through the second barrier
// itself (bar.red.or), not through a flag in shared memory. The flag form (before session 36) was
// ordered by its two barriers: the write
// before every read by the second, every read before the next unit's write by the next unit's
// first, which each thread reaches only after its read. compute-sanitizer racecheck reported the
// write and the reads as a hazard all the same, on the one sanitizer case whose CTAs each ran
// several split units (128 x 16 tiles, 16 splits); with no shared-memory access there is none to
// report, and a barrier with a reduction replaces a barrier, a store and a load.
#pragma once
#include "common/types.cuh"
#include "ptx/sync.cuh"

namespace fp8gemm {

/// bar.red.or.pred id, count: named barrier ``id`` over ``count`` threads (a multiple of 32, every
/// thread of each participating warp) that returns to each of them whether any passed ``pred``
/// true; it orders memory as bar.sync does. Here rather than in ptx/sync.cuh: split-K is its only
/// user.
__device__ __forceinline__ bool named_barrier_red_or(uint32_t id, uint32_t count, bool pred) {
    uint32_t any;
    asm volatile("{\n\t.reg .pred p, q;\n\tsetp.ne.u32 q, %1, 0;\n\t"
                 "bar.red.or.pred p, %2, %3, q;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(any) : "r"(static_cast<uint32_t>(pred)), "r"(id), "r"(count) : "memory");
    return any != 0;
}

/// This thread's share of a split's partial ``total`` into workspace slot ``ws_slot + split_idx``
/// (layout [tile][split][j][consumer thread][4]: coalesced float4 per j); nothing where
/// ``has_rows`` is false (a thread none of whose values is ever stored: swap-AB at M = 1, 64 of
/// 256 threads).
template <uint32_t kTileFloats, uint32_t kConsumerThreads, int kNumAccum>
__device__ __forceinline__ void split_k_store_partial(const float (&total)[kNumAccum], float* workspace,
                                                      uint32_t ws_slot, uint32_t split_idx, bool has_rows,
                                                      uint32_t consumer_tid) {
    float* mine = workspace + (static_cast<int64_t>(ws_slot) + split_idx) * kTileFloats;
    if (has_rows) {
#pragma unroll
        for (int j = 0; j < kNumAccum / 4; ++j) {
            const float v[4] = {total[4 * j], total[4 * j + 1], total[4 * j + 2], total[4 * j + 3]};
            st_cg_f32x4(mine + (j * kConsumerThreads + consumer_tid) * 4, v);
        }
    }
}

/// One thread (consumer 0, after a barrier that follows every consumer's store of the partial):
/// count the split in on ``tile_idx``'s counter; 1 if it was the tile's last split (then the
/// counter is reset to 0 for the next launch), else 0.
/// NOTES: no per-thread fence. The barrier before orders every consumer thread's stores before
/// this acq_rel add (a release is cumulative), and the barrier after orders the add's acquire
/// before every thread's loads of the other partials (the pattern of CUTLASS's split-K
/// semaphore). The two __threadfence() it replaces cost ~0.5 us of a 5 us decode GEMM
/// (bench/NOTES.md, "split-K without fences").
__device__ __forceinline__ uint32_t split_k_count_in(uint32_t* tile_counters, uint32_t tile_idx,
                                                    uint32_t num_splits) {
    const uint32_t done = atomic_add_acq_rel_gpu(&tile_counters[tile_idx], 1u);
    const uint32_t last = (done == num_splits - 1) ? 1u : 0u;
    if (last) tile_counters[tile_idx] = 0;        // ready for the next launch
    return last;
}

/// For every consumer thread of a CTA (kConsumerThreads of them, synchronized on named barrier
/// ``barrier``), after each stored what this split contributes to tile ``tile_idx``: count the
/// split in; returns, to every one of them, whether this CTA ran the tile's last split.
template <uint32_t kConsumerThreads>
__device__ __forceinline__ bool split_k_arrive(uint32_t* tile_counters, uint32_t tile_idx, uint32_t num_splits,
                                               uint32_t consumer_tid, uint32_t barrier) {
    named_barrier_sync(barrier, kConsumerThreads);
    const bool last = consumer_tid == 0 && split_k_count_in(tile_counters, tile_idx, num_splits) != 0;
    // NOTES: the vote changes no value (the barrier gave every thread the same one); it tells
    // ptxas that the result is warp-uniform. From the barrier's result alone it took the caller's
    // ``continue`` for a divergent branch and put a divergence check (BRA.DIV) before every
    // shuffle and barrier of the K loop: 1872 instructions instead of 1568 (128 x 16 tiles).
    return __any_sync(0xffffffffu, named_barrier_red_or(barrier, kConsumerThreads, last));
}

/// For every consumer thread of a CTA (kConsumerThreads of them, synchronized on named barrier
/// ``barrier``): publish this split's partial ``total`` of tile ``tile_idx`` into workspace slot
/// ``ws_slot + split_idx`` (WorkUnit: the tile's partials lie in consecutive slots) and count the
/// split in; returns, to every one of them, whether this CTA ran the tile's last split (then
/// split_k_sum gathers the tile).
template <uint32_t kTileFloats, uint32_t kConsumerThreads, int kNumAccum>
__device__ __forceinline__ bool split_k_publish(const float (&total)[kNumAccum], float* workspace,
                                                uint32_t* tile_counters, uint32_t tile_idx, uint32_t ws_slot,
                                                uint32_t split_idx, uint32_t num_splits, bool has_rows,
                                                uint32_t consumer_tid, uint32_t barrier) {
    split_k_store_partial<kTileFloats, kConsumerThreads>(total, workspace, ws_slot, split_idx, has_rows, consumer_tid);
    return split_k_arrive<kConsumerThreads>(tile_counters, tile_idx, num_splits, consumer_tid, barrier);
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
