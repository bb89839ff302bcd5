"""Decode (small M, long K) on the H200 (issue 5): what a kernel that only *reads* the weights
costs, against what our swap-AB split-K GEMM costs, per split count, before and after a source
change. Device time per call: CUPTI, L2 cold (the benchmark's timer), median of --iters.

Floors, each one kernel launch:
  empty     1 block that does nothing: the timer's view of a launch that touches no memory;
  one_load  one 16-byte DRAM load per SM, then a conditional store: launch + one DRAM round trip;
  read      every byte of B [N, K] read once by all SMs (16-byte loads, 4 in flight per thread).
Variants of the general kernel (swap-AB, block_n 8 unless said): `new` is the source as it is,
`old` the source with the edits in OLD applied (the split-K reduction before session 9),
`fence` the source with the handshake's two __threadfence() of v13 back (FENCE),
`noreduce` the source with the split-K handshake removed (each split stores its partial as C:
wrong values, timing only: what the partial/fence/atomic/reduction chain costs).
Usage: PYTHONPATH=. python tools/exp_decode.py [--iters 20] [--splits 1,2,4,8,16] [--versions new,noreduce]
       [--shapes MxNxK,...]   (`new/disp` and `noreduce/disp`: the dispatcher's pick with and without
       its split-K handshake, whichever variant and tile it is)"""
import argparse

import cupy
import numpy as np
import torch

from fp8gemm import compiler
from fp8gemm.bench.timing import L2Flush, StreamRef, time_calls
from fp8gemm.dispatch import Candidate, select, smem_bytes_of
from fp8gemm.intake import intake
from fp8gemm.launcher import plan
from fp8gemm import output
from fp8gemm.testing import random_case
from fp8gemm.validate import validate_gemm

from exp_general import patched   # source edits on the flattened kernel (tools/exp_general.py)

GEN = "sm90_fp8_gemm_general"
PAIRS = [(512, 1024), (512, 4096), (1536, 1024), (1536, 4096), (4096, 1024), (4096, 4096), (8192, 1024),
         (8192, 4096)]
SHAPES = [(1, n, k) for n, k in PAIRS] + [(64, 512, 4096), (16, 1536, 4096)]
OLD_SHAPES = [(1, 512, 4096), (64, 512, 4096), (1, 1536, 4096), (16, 1536, 4096), (1, 4096, 4096),
          (64, 4096, 4096), (1, 8192, 4096), (1, 512, 1024), (1, 4096, 1024), (1, 8192, 1024)]

# The reduction as it was before session 9 (one split's loads at a time, unroll 4, every thread).
OLD = {
    "const bool has_rows = row0 < ROWS && (!kSwapAB || col0 < col_limit);": "const bool has_rows = row0 < ROWS;",
    ("                for (uint32_t s0 = 0; has_rows && s0 < num_splits; s0 += kChunk) {",
     "            // ---- epilogue"): """\
#pragma unroll 4
                for (uint32_t s = 0; s < num_splits; ++s) {
                    if (!has_rows) break;
#pragma unroll
                    for (int j = 0; j < Mma::kNumAccum / 4; ++j) {
                        const float4 v = __ldcg(part + s * kFloat4PerSplit + j * kNumConsumerThreads);
                        total[4 * j] += v.x;
                        total[4 * j + 1] += v.y;
                        total[4 * j + 2] += v.z;
                        total[4 * j + 3] += v.w;
                    }
                }
            }

""",
}
# The handshake before v14: a __threadfence() by every thread before the counter's (relaxed) add,
# and another before the last split's loads.
FENCE = {
    "                named_barrier_sync(kConsumerBarrier, kNumConsumerThreads);\n                if (consumer_tid == 0) {\n"
    "                    const uint32_t done = atomic_add_acq_rel_gpu(&tile_counters[w.tile_idx], 1u);":
    "                __threadfence();\n                named_barrier_sync(kConsumerBarrier, kNumConsumerThreads);\n"
    "                if (consumer_tid == 0) {\n                    const uint32_t done = atomicAdd(&tile_counters[w.tile_idx], 1u);",
    "                if (*last_split_flag == 0) continue;              // another split finishes the tile\n":
    "                if (*last_split_flag == 0) continue;              // another split finishes the tile\n"
    "                __threadfence();\n",
}
OLD = {**OLD, **FENCE}
NOREDUCE = {"if (!kSwiGLU && num_splits > 1) {": "if (false) {"}
# Timeline (timing only): thread 128 of each CTA writes %globaltimer and clock64 into the unused
# act_scale argument (set by --timeline) at: 0 start, 1 mainloop done, 2 split handshake done
# (3: whether this CTA was last), 4 reduction done (last split only), 5 consumer exit.
STAMP_FN = """
namespace fp8gemm {
__device__ __forceinline__ void dbg_stamp(float* buf, uint32_t slot, unsigned long long extra = 0) {
    unsigned long long g;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));
    unsigned long long* p = reinterpret_cast<unsigned long long*>(buf) + (blockIdx.x * 8 + slot) * 2;
    p[0] = extra ? extra : g;
    p[1] = clock64();
}
}
"""
STAMP = "if (threadIdx.x == 128 && act_scale != nullptr) dbg_stamp(act_scale, "
TIMELINE = {
    "namespace fp8gemm {\n\nnamespace general {": STAMP_FN + "namespace fp8gemm {\n\nnamespace general {",
    "    if constexpr (kGrouped) group_tile_prefix<kTokenTile>(groups, num_groups, group_rows, M, tile_prefix);\n    __syncthreads();":
        "    if constexpr (kGrouped) group_tile_prefix<kTokenTile>(groups, num_groups, group_rows, M, tile_prefix);\n"
        "    __syncthreads();\n    " + STAMP + "0);",
    "            // ---- split-K: publish": "            " + STAMP + "1);\n            // ---- split-K: publish",
    "                if (*last_split_flag == 0) continue;":
        "                " + STAMP + "2); " + STAMP + "3, 1 + *last_split_flag);\n"
        "                if (*last_split_flag == 0) continue;",
    "            // ---- epilogue ----": "            " + STAMP + "4);\n            // ---- epilogue ----",
    "        if constexpr (kTmaStore) {\n            if (threadIdx.x % kWarpgroupThreads == 0) tma_store_wait<0>();":
        "        " + STAMP + "5);\n        if constexpr (kTmaStore) {\n"
        "            if (threadIdx.x % kWarpgroupThreads == 0) tma_store_wait<0>();",
}
EDITS = {"old": OLD, "fence": FENCE, "noreduce": NOREDUCE, "new": {}, "timeline": TIMELINE}
_ARG_ACT_SCALE = 21      # sm90_fp8_gemm_general_kernel's act_scale (unused outside the fused L1)

FLOOR_SRC = r"""
extern "C" __global__ void empty_kernel() {}
extern "C" __global__ void one_load(const int4* __restrict__ p, unsigned long long n, int* sink) {
    if (threadIdx.x == 0) {
        const int4 v = __ldcg(p + ((unsigned long long)blockIdx.x * 4096) % n);
        if (v.x == 0x12345 && v.y == 7) *sink = v.z;
    }
}
extern "C" __global__ void read_all(const int4* __restrict__ p, unsigned long long n, int* sink) {
    int acc = 0;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const int4 a = __ldcg(p + i), b = __ldcg(p + i + stride), c = __ldcg(p + i + 2 * stride),
                   d = __ldcg(p + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n; i += stride) { const int4 a = __ldcg(p + i); acc ^= a.x ^ a.y ^ a.z ^ a.w; }
    if (acc == 0x7654321) *sink = acc;
}
"""


def timeline(shapes, split_list, reps=20):
    """Per phase, in µs (globaltimer; median over `reps` L2-cold launches and over the tiles):
    launch skew of the CTAs, mainloop, the handshake of the non-last splits and of the last one,
    the last split's reduction and store."""
    import statistics

    flush = L2Flush()
    orig_flatten = compiler.flatten
    compiler.flatten = patched(TIMELINE)
    compiler._kernels.clear()
    try:
        for m, n, k in shapes:
            case = random_case(m, n, k, seed=1)
            a, b, sa, sb = case.as_torch()
            sf = output.stream_for_framework("torch")
            prob = validate_gemm(*(intake(x, nm, sf) for x, nm in ((a, "a"), (b, "b"), (sa, "a_scale"),
                                                                     (sb, "b_scale"))), None, None)
            for splits in split_list:
                cand = Candidate(GEN, 8, 6, 1, splits, True)
                runner = plan(prob, cand, smem_bytes_of(cand, prob.out_dtype), n, True)
                grid = runner.grid
                stamps = torch.zeros(grid * 8 * 2, dtype=torch.int64, device="cuda")
                runner.params.set_u64(_ARG_ACT_SCALE, stamps.data_ptr())
                out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
                rows = []
                for _ in range(reps):
                    flush(torch.cuda.current_stream().cuda_stream)
                    stamps.zero_()
                    runner.run(out.data_ptr(), torch.cuda.current_stream().cuda_stream)
                    torch.cuda.synchronize()
                    t = stamps.view(grid, 8, 2)[:, :, 0].cpu().numpy().astype(np.float64)
                    t0 = t[:, 0].min()
                    last = t[:, 3] == 2
                    rows.append({
                        "skew": t[:, 0].max() - t0,
                        "mainloop": np.median(t[:, 1] - t[:, 0]),
                        "mainloop_max": (t[:, 1] - t[:, 0]).max(),
                        "handshake_other": np.median((t[:, 2] - t[:, 1])[~last]) if (~last).any() else 0,
                        "handshake_last": np.median((t[:, 2] - t[:, 1])[last]),
                        "last_waits_from_first_done": np.median(t[last, 2]) - t[:, 1].min(),
                        "reduce": np.median((t[:, 4] - t[:, 2])[last]),
                        "store": np.median((t[:, 5] - t[:, 4])[last]),
                        "span": t[:, 5].max() - t0,
                    })
                med = {key: statistics.median(r[key] for r in rows) / 1000.0 for key in rows[0]}
                print(f"timeline {m} {n} {k} k{splits} grid {grid}: " +
                      " ".join(f"{key} {v:.2f}" for key, v in med.items()), flush=True)
    finally:
        compiler.flatten = orig_flatten
        compiler._kernels.clear()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--splits", default="1,2,4,8,16")
    ap.add_argument("--versions", default="old,new", help="of: " + ",".join(EDITS))
    ap.add_argument("--first-run-shapes", action="store_true", help="the shapes of the first run (session 9)")
    ap.add_argument("--timeline", action="store_true", help="per-phase times of the split-K kernel instead")
    ap.add_argument("--shapes", help="MxNxK,... instead of the built-in list")
    args = ap.parse_args()
    if args.timeline:
        timeline([(1, 512, 4096), (1, 1536, 4096), (1, 4096, 4096)], [int(s) for s in args.splits.split(",")])
        return
    split_list = [int(s) for s in args.splits.split(",")]
    versions = args.versions.split(",")
    flush = L2Flush()
    mod = cupy.RawModule(code=FLOOR_SRC)
    k_empty, k_one, k_read = (mod.get_function(n) for n in ("empty_kernel", "one_load", "read_all"))
    sink = cupy.zeros(1, dtype=cupy.int32)
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    orig_flatten = compiler.flatten
    print("M N K | roofline_us | empty one_load read | dispatcher (us) | " +
          " ".join(f"{v}/k{s}" for v in versions for s in split_list), flush=True)
    shapes = OLD_SHAPES if args.first_run_shapes else SHAPES
    if args.shapes:
        shapes = [tuple(int(v) for v in x.split("x")) for x in args.shapes.split(",")]
    for m, n, k in shapes:
        case = random_case(m, n, k, seed=1)
        a, b, sa, sb = case.as_torch()
        st = lambda: StreamRef(torch.cuda.current_stream().cuda_stream)
        bbuf = cupy.asarray(b.view(torch.uint8))
        n16 = np.uint64(bbuf.size // 16)
        fns = {
            "empty": lambda: k_empty.kernel((1, 1, 1), (32, 1, 1), (), 0, st()),
            "one_load": lambda: k_one.kernel((sms, 1, 1), (32, 1, 1), (bbuf, n16, sink), 0, st()),
            "read": lambda: k_read.kernel((sms * 4, 1, 1), (256, 1, 1), (bbuf, n16, sink), 0, st()),
        }
        sf = output.stream_for_framework("torch")
        prob = validate_gemm(*(intake(x, nm, sf) for x, nm in ((a, "a"), (b, "b"), (sa, "a_scale"),
                                                                 (sb, "b_scale"))), None, None)
        chosen = select(m, n, k)
        outs = {}
        for ver in versions:
            compiler.flatten = patched(EDITS[ver]) if EDITS[ver] else orig_flatten
            compiler._kernels.clear()
            cands = {f"{ver}/k{s}": Candidate(GEN, 8, 6, 1, s, True) for s in split_list}
            cands[f"{ver}/disp"] = chosen
            for name, cand in cands.items():
                if cand.splits > -(-k // 128):
                    continue
                runner = plan(prob, cand, smem_bytes_of(cand, prob.out_dtype), n, True)
                out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
                fns[name] = (lambda r=runner, o=out: r.run(o.data_ptr(), torch.cuda.current_stream().cuda_stream))
                outs[name] = out
        compiler.flatten = orig_flatten
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        ref = outs[f"{versions[0]}/disp"].float()
        for name, o in outs.items():
            d = float((o.float() - ref).norm() / ref.norm())
            twin = None if "noreduce" in name else outs.get(f"{versions[0]}/{name.split('/')[1]}")
            bad = int((o.float() != twin.float()).sum()) if twin is not None else 0
            if (d > 1e-2 and "noreduce" not in name) or bad:
                print(f"  MISMATCH {m} {n} {k} {name}: rel {d:.2e}, {bad} values differ from {versions[0]}",
                      flush=True)
        t = time_calls(fns, flush, args.iters)
        roof = (n * k + m * k + 2 * m * n) / 4.29e6
        cols = " ".join(f"{t.get(f'{v}/k{s}', float('nan')):6.2f}" for v in versions for s in split_list)
        disp = " ".join(f"{t[f'{v}/disp']:6.2f}" for v in versions)
        print(f"{m} {n} {k} | {roof:5.2f} | {t['empty']:5.2f} {t['one_load']:5.2f} {t['read']:5.2f} | "
              f"k{chosen.splits} bn{chosen.block_n} {disp} | {cols}", flush=True)


if __name__ == "__main__":
    main()
