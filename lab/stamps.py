"""Lab (issue 27): where a short GEMM's time goes, ours against DeepGEMM's, from %globaltimer stamps
written by one thread of each CTA's (first) math warpgroup into a device buffer whose address is
patched into both kernels' sources in this process (ours through compiler.flatten, DeepGEMM's
sm90_fp8_gemm_1d2d.cuh in its installed package, restored at exit; DEEPGEMM's JIT cache pointed at
a fresh folder so that it compiles the stamped copy). Stamps, per CTA, of its first work unit:
  0 kernel entry   1 after the CTA's barrier init and sync   2 the math warps' first unit begins
  3 its K loop ends (last promotion done)   4 its epilogue has issued its stores
  5 the math path ends (ours: after the last TMA store's read wait)
  6 the producer thread begins its loads (after the CTA sync)   7 the producer has issued its last load.
Per shape and contender: the medians over ROUNDS launches (L2 flushed before each) of the grid's
span (last 4 - first 0), the launch skew (last 0 - first 0), its end (last stamp of any kind -
first 0), the last producer's end after the last stores (p7-4), and per CTA the medians of 1-0,
2-1, 3-2, 4-3, 5-4, 6-1 and 7-6; beside them the CUPTI time of the same (stamped) kernels, in turns.
Markers: before each launch a one-thread kernel spins SPIN_US (so that the host's launches queue up
behind it), one more writes %globaltimer as it starts (m1), then the contender, then another
marker (m2): "pre" = first stamp 0 - m1 (the marker's end, the launch and the CTAs' start), "post"
= m2 - last stamp (the grid's retirement, the marker's start); the same markers for every
contender, so their difference between contenders places the part of the CUPTI time that lies
outside the stamps. CARVEOUT=percent: our kernels' preferred shared-memory carve-out.
Usage: [NOSTORE=1] [CARVEOUT=100] python lab/stamps.py OUT.json   (SHAPES="M,N,K[,block_m,block_n,stages];..." overrides)"""
import glob
import json
import os
import shutil
import sys
import tempfile

import torch

SLOTS = 8                        # stamps per CTA in the buffer
MAX_CTAS = 4096
STAMP = ("#define LAB_STAMP_ANY(i) do {{ unsigned long long g_; "
         "asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(g_)); "
         "reinterpret_cast<unsigned long long*>({addr:#x}ULL)[blockIdx.x * {slots} + (i)] = g_; }} while (0)\n"
         "#define LAB_STAMP(i) do {{ if (threadIdx.x == {thread}) LAB_STAMP_ANY(i); }} while (0)\n")

# (anchor, text inserted after it, count) for our general kernel
OURS = [
    ("#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)\n    using namespace general;\n",
     "    LAB_STAMP(0);\n", 1),
    ("                                                        1u + (kCopySlots ? kScaleCopyArrivals : 0u));\n",
     "    LAB_STAMP(1);\n", 1),
    ("            const WorkUnit w = sched.unit(u);\n", "            const bool lab_first = pass == blockIdx.x * kSubTiles;\n"
     "            if (lab_first) LAB_STAMP(2);\n", 1),
    ("            // ---- split-K: publish this split's partial; the last split of the tile reduces ----\n",
     "            if (lab_first) LAB_STAMP(3);\n", 1),
    ("                store_fragments_direct<kOut, BLOCK_N>(total, out, ldc, row_limit, N, row0, col0);\n            }\n",
     "            if (lab_first) LAB_STAMP(4);\n", 1),
    ("            if (threadIdx.x % kWarpgroupThreads == 0) tma_store_wait_read<0>();\n        }\n",
     "        LAB_STAMP(5);\n", 1),
]
# the producer thread (its one thread runs these lines; in the copy-slots form its lane 0)
OURS += [
    ("        UnitLoads l = producer_first;\n",
     "        if (threadIdx.x % 32 == 0) LAB_STAMP_ANY(6);\n", 1),
    ("        produce_units<kNumStages, kSubTiles, kSwiGLU, kScaleTma>(tiles, producer_sched, l, smem, tmap_a, tmap_b,\n"
     "                                                                 tmap_sa, tmap_sb, scale_slots, copy);\n",
     "        if (threadIdx.x % 32 == 0) LAB_STAMP_ANY(7);\n", 1),
]
# DeepGEMM's SM90 1D2D kernel (math threads first: thread 0 is math warpgroup 0's)
DG = [
    ("#if (defined(__CUDA_ARCH__) and (__CUDA_ARCH__ >= 900)) or defined(__CLION_IDE__)\n    // Scaling checks\n",
     "    LAB_STAMP(0);\n    uint32_t lab_unit = 0;\n", 1),
    ("    (kNumTMAMulticast > 1) ? comm::cluster_sync_with_relaxed_arrive() : __syncthreads();\n",
     "    LAB_STAMP(1);\n", 1),
    ("        // Persistently schedule over blocks\n        while (scheduler.get_next_block(m_block_idx, n_block_idx)) {\n",
     "            if (lab_unit == 0) LAB_STAMP(2);\n", 1),
    ("            // TMA checks\n", "            if (lab_unit == 0) LAB_STAMP(3);\n", 1),
    ("                cute::tma_store_arrive();\n            }\n            __syncwarp();\n",
     "            if (lab_unit++ == 0) LAB_STAMP(4);\n", 1),
    ("            __syncwarp();\n            if (lab_unit++ == 0) LAB_STAMP(4);\n        }\n",
     "        LAB_STAMP(5);\n", 1),
    ("        if (warp_idx == kNumMathThreads / 32 + 2 and cute::elect_one_sync()) {\n",
     "            LAB_STAMP_ANY(6);\n", 1),
    ("            // To safely deconstruct distributed shared barriers, we need another round of empty waits\n",
     "            LAB_STAMP_ANY(7);\n", 1),
]


# NOSTORE=1: our direct-store epilogue keeps its values live but stores nothing (results invalid):
# what the stores' drain adds after the last CTA's stamp 4.
NOSTORE = ("                store_fragments_direct<kOut, BLOCK_N>(total, out, ldc, row_limit, N, row0, col0);\n            }\n",
           "                if (total[0] == 1234.5f && N == 7u) static_cast<float*>(out)[0] = total[1];\n            }\n")


def patch(src: str, edits, header: str) -> str:
    if header.startswith("#define LAB_STAMP(i) do { if (threadIdx.x == 128)") and os.environ.get("NOSTORE") == "1":
        assert src.count(NOSTORE[0]) == 1
        src = src.replace(NOSTORE[0], NOSTORE[1])
        edits = [(NOSTORE[1] if a == NOSTORE[0] else a, t, c) for a, t, c in edits]
    for anchor, text, count in edits:
        assert src.count(anchor) == count, f"anchor found {src.count(anchor)} times: {anchor[:70]!r}"
        src = src.replace(anchor, anchor + text)
    return header + src


def shapes():
    env = os.environ.get("SHAPES")
    if env:
        return [tuple(int(x) for x in s.split(",")) for s in env.split(";") if s]
    return [(128, 512, 1024, 64, 16, 16), (512, 512, 1024, 64, 32, 16), (48, 4096, 1024, 64, 32, 16),
            (256, 1536, 1024, 64, 64, 8), (64, 8192, 1024, 64, 64, 8), (128, 4096, 4096, 64, 64, 8)]


MARK = r"""
extern "C" __global__ void lab_mark(unsigned long long* out, unsigned long long spin_ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    if (spin_ns) {
        do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < spin_ns);
    }
    out[0] = t0;
}
"""

KEYS = ("pre", "post", "span", "skew", "end", "p7-4", "1-0", "2-1", "3-2", "4-3", "5-4", "6-1", "7-6")


def summarize(rounds):
    """rounds: ([ctas, SLOTS] int64 tensor (0 = not written), m1, m2) -> medians in microseconds."""
    import statistics
    keys = KEYS
    per = {k: [] for k in keys}
    for t, m1, m2 in rounds:
        t = t[t[:, 0] > 0].double()
        if len(t) == 0:
            continue
        per["pre"].append(t[:, 0].min().item() - m1)
        per["post"].append(m2 - t.max().item())
        per["span"].append((t[:, 4].max() - t[:, 0].min()).item())
        per["skew"].append((t[:, 0].max() - t[:, 0].min()).item())
        per["end"].append((t.max() - t[:, 0].min()).item())
        if (t[:, 7] > 0).any():
            per["p7-4"].append((t[:, 7].max() - t[:, 4].max()).item())
        for k in keys[6:]:
            j, i = (int(x) for x in k.split("-"))
            ok = (t[:, i] > 0) & (t[:, j] > 0)
            if ok.any():
                per[k].append((t[ok, j] - t[ok, i]).median().item())
    return {k: round(statistics.median(v) / 1e3, 3) if v else None for k, v in per.items()}


def cupti_marked(fns, flush, marked, iters):
    """{label: median CUPTI time of the contender's own kernels} with each call run as the stamps
    ran it (flush, spin, marker, call, marker) instead of right after the flush, in turns."""
    import statistics

    from fp8gemm.bench.timing import FLUSH_KERNEL, _device_activities, turns
    from torch.profiler import ProfilerActivity, profile
    order = turns(list(fns), iters)
    stream = torch.cuda.current_stream().cuda_stream
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for name in order:
            flush(stream)
            marked(fns[name])
        torch.cuda.synchronize()
    calls, current = [], None
    for _start, dur_ns, name in _device_activities(prof):
        if FLUSH_KERNEL in name:
            if current is not None:
                calls.append(current)
            current = 0.0
        elif current is not None and "lab_mark" not in name:
            current += dur_ns / 1000.0
    calls.append(current)
    assert len(calls) == len(order), (len(calls), len(order))
    per = {}
    for name, t in zip(order, calls):
        per.setdefault(name, []).append(t)
    return {name: statistics.median(v) for name, v in per.items()}


def main(out):
    buf = torch.zeros(MAX_CTAS * SLOTS, dtype=torch.int64, device="cuda")
    import fp8gemm
    from fp8gemm import compiler
    from fp8gemm.bench.timing import L2Flush, time_calls
    from fp8gemm.dispatch import General
    from fp8gemm.testing import random_case

    flatten = compiler.flatten
    ours_header = STAMP.format(thread=128, addr=buf.data_ptr(), slots=SLOTS)
    compiler.flatten = lambda v: patch(flatten(v), OURS, ours_header) if v == "sm90_fp8_gemm_general" else flatten(v)

    dg_file, dg_orig = None, None
    try:
        import deep_gemm
        from fp8gemm.bench.peers import Inputs, prepare_deepgemm
        dg_file = glob.glob(os.path.join(os.path.dirname(deep_gemm.__file__), "include", "deep_gemm", "impls",
                                         "sm90_fp8_gemm_1d2d.cuh"))[0]
        dg_orig = open(dg_file).read()
        open(dg_file, "w").write(patch(dg_orig, DG, STAMP.format(thread=0, addr=buf.data_ptr(), slots=SLOTS)))
    except ImportError:
        deep_gemm = None
    if os.environ.get("CARVEOUT"):
        build = compiler._build

        def build_carveout(*args, **kw):
            kern = build(*args, **kw)
            kern.preferred_shared_memory_carveout = int(os.environ["CARVEOUT"])
            return kern
        compiler._build = build_carveout
    import cupy
    import numpy as np
    mark = cupy.RawKernel(MARK, "lab_mark")
    marks = torch.zeros(3, dtype=torch.int64, device="cuda")
    spin_ns = np.uint64(float(os.environ.get("SPIN_US", "300")) * 1000)

    def marked(f):
        stream = torch.cuda.current_stream().cuda_stream
        with cupy.cuda.ExternalStream(stream):
            mark((1,), (1,), (marks.data_ptr() + 16, spin_ns))
            mark((1,), (1,), (marks.data_ptr(), np.uint64(0)))
        f()
        with cupy.cuda.ExternalStream(stream):
            mark((1,), (1,), (marks.data_ptr() + 8, np.uint64(0)))
    flush = L2Flush()
    rounds_n = int(os.environ.get("ROUNDS", "30"))
    results = {}
    try:
        fns, keep = {}, []
        for m, n, k, bm, bn, st in shapes():
            case = random_case(m, n, k, seed=1)
            a, b, sa, sb = case.as_torch()
            keep.append((a, b, sa, sb))
            calls = {"ours": (lambda a=a, b=b, sa=sa, sb=sb, c=General(bn, st, 8, 1, bm):
                              fp8gemm.matmul(a, b, sa, sb, config=c)),
                     "ours auto": (lambda a=a, b=b, sa=sa, sb=sb: fp8gemm.matmul(a, b, sa, sb))}
            if deep_gemm is not None:
                x = Inputs(case, "bfloat16")
                keep.append(x)
                calls["deepgemm"] = prepare_deepgemm(x)["fp8_gemm_nt"]
            for who, f in calls.items():
                f()
                torch.cuda.synchronize()
                rounds = []
                for _ in range(rounds_n):
                    buf.zero_()
                    flush(torch.cuda.current_stream().cuda_stream)
                    marked(f)
                    torch.cuda.synchronize()
                    mk = marks.cpu()
                    rounds.append((buf.view(MAX_CTAS, SLOTS).cpu(), int(mk[0]), int(mk[1])))
                label = f"{m}x{n}x{k} {who}" + (f" {bm}x{bn} s{st}" if who == "ours" else "")
                results[label] = summarize(rounds)
                fns[label] = f
        us = time_calls(fns, flush, int(os.environ.get("ITERS", "15")))
        us_marked = cupti_marked(fns, flush, marked, int(os.environ.get("ITERS", "15")))
    finally:
        if dg_file is not None:
            open(dg_file, "w").write(dg_orig)
    keys = KEYS
    print(f"{'contender':44}{'CUPTI':>8}{'marked':>8}" + "".join(f"{k:>8}" for k in keys) + "   (us; medians)")
    for label, r in results.items():
        r["cupti_us"] = round(us[label], 3)
        r["cupti_marked_us"] = round(us_marked[label], 3)
        print(f"{label:44}{us[label]:8.2f}{us_marked[label]:8.2f}" + "".join(f"{r[k]:8.2f}" if r[k] is not None else f"{'-':>8}" for k in keys))
    with open(out, "w") as fh:
        json.dump(results, fh, indent=1)


if __name__ == "__main__":
    if "DG_JIT_CACHE_DIR" in os.environ:          # the stamped DeepGEMM compiles into its own cache
        os.environ["DG_JIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="dg_stamps_")
    try:
        main(sys.argv[1])
    finally:
        shutil.rmtree(os.environ.get("DG_JIT_CACHE_DIR", "/nonexistent"), ignore_errors=True) \
            if "dg_stamps_" in os.environ.get("DG_JIT_CACHE_DIR", "") else None
