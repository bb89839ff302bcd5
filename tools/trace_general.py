"""Where a general-kernel launch spends its fixed time (issue 4): a timeline of one launch, from
clock64 / %globaltimer stamps that a source patch adds at fixed points of the kernel (this process
only; the kernel computes as committed). Per CTA: entry, the producer's first TMA issue, the
consumers' start (after setmaxnreg and the scheduler) and first full stage, the first tile's K loop
end, its TMA store issue, the last tile's K loop end and the final store wait. Prints medians and
ranges over the CTAs in ns (each CTA's clock converted with its own cycles per ns), beside the
launch's CUPTI device time (L2 flushed, median of 10) without the stamps.
Usage: PYTHONPATH=. python tools/trace_general.py [--shapes MxNxK,...] [--stages S] [--order]
(run from an archive of an older commit with PYTHONPATH=<that root> to trace its kernel; --order adds
the session-14 issue ordering to kernels that lack it)"""
import sys

import numpy as np

sys.path.insert(0, __import__("os").path.dirname(__file__))
from exp_general import torch_problem  # noqa: E402  (tools/ is not a package)

from fp8gemm import compiler
from fp8gemm.dispatch import Candidate, smem_bytes_of

GEN = "sm90_fp8_gemm_general"
SLOTS = 24
HEADER = """
__device__ unsigned long long fp8_trace[2048 * 24];
__device__ __forceinline__ unsigned long long fp8_gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
"""
# Each stamp: (anchor, replacement) alternatives, the first anchor found once is used (the
# committed kernel and older ones, e.g. an archive of main, spell the producer differently).
EDITS = [
    [("    using Mma = WgmmaFp8<BLOCK_N>;\n",
      "    using Mma = WgmmaFp8<BLOCK_N>;\n    unsigned long long* const tr_ = fp8_trace + blockIdx.x * 24;\n"
      "    bool tr_first_ = true;\n"
      "    if (threadIdx.x == 0) { tr_[0] = clock64(); tr_[1] = fp8_gtimer(); }\n")],
    [("                            tma_load_2d(b_stage, &tmap_b, bar, kb * BLOCK_K, l.b_row);\n",
      "                            tma_load_2d(b_stage, &tmap_b, bar, kb * BLOCK_K, l.b_row);\n"
      "                            if (tr_first_) tr_[2] = clock64();\n"
      "                            tr_first_ = false; tr_[13] = clock64();\n"),
     ("                            tma_load_2d(b_stage, &tmap_b, bar, kb * BLOCK_K, b_row);\n",
      "                            tma_load_2d(b_stage, &tmap_b, bar, kb * BLOCK_K, b_row);\n"
      "                            if (tr_first_) tr_[2] = clock64();\n"
      "                            tr_first_ = false; tr_[13] = clock64();\n")],
    [("        setmaxnreg_inc<kConsumerRegs>();\n        const auto sched = make_scheduler();\n",
      "        if (threadIdx.x == 128) tr_[20] = clock64();\n"
      "        setmaxnreg_inc<kConsumerRegs>();\n        const auto sched = make_scheduler();\n"
      "        if (threadIdx.x == 128) tr_[3] = clock64();\n        uint32_t ntiles_ = 0; bool first_full_ = true;\n")],
    [("                        mbarrier_wait_parity(&full_bar[stage], pipe.full_parity());\n                        const uint32_t lo_a",
      "                        mbarrier_wait_parity(&full_bar[stage], pipe.full_parity());\n"
      "                        if (first_full_) { first_full_ = false; if (threadIdx.x == 128) tr_[4] = clock64();"
      " if (threadIdx.x == 256) tr_[12] = clock64(); }\n                        const uint32_t lo_a")],
    [("            // ---- split-K: publish this split's partial",
      "            if (threadIdx.x == 128) { if (ntiles_ == 0) tr_[5] = clock64(); tr_[11] = clock64(); ++ntiles_;"
      " tr_[10] = ntiles_; }\n            // ---- split-K: publish this split's partial")],
    [("kNumConsumerWarpgroups * 4);\n",
      "kNumConsumerWarpgroups * 4);\n    if (threadIdx.x == 0) tr_[14] = clock64();\n")],
    [("    if (!kGrouped && warpgroup_idx == 0) setmaxnreg_dec<kProducerRegs>();\n",
      "    if (!kGrouped && warpgroup_idx == 0) setmaxnreg_dec<kProducerRegs>();\n"
      "    if (threadIdx.x == 32) tr_[15] = clock64();\n"),
     ("        setmaxnreg_dec<kProducerRegs>();\n",
      "        setmaxnreg_dec<kProducerRegs>();\n        if (threadIdx.x == 0) tr_[15] = clock64();\n")],
    # (the scheduler and the first unit: one stamp pair where a helper computes both)
    [[("                                    make_scheduler, unit_loads);\n",
       "                                    make_scheduler, unit_loads);\n"
       "    if (threadIdx.x == 32) { tr_[16] = clock64(); tr_[17] = tr_[16]; }\n")],
     [("            const auto sched = make_scheduler();\n            PipelineState<kNumStages> pipe;\n",
       "            const auto sched = make_scheduler();\n            PipelineState<kNumStages> pipe;\n"
       "            tr_[16] = clock64();\n"),
      ("                for (uint32_t sub = 0; sub < kSubTiles; ++sub) {\n",
       "                if (u == blockIdx.x) tr_[17] = clock64();\n"
       "                for (uint32_t sub = 0; sub < kSubTiles; ++sub) {\n")]],
    [("                        mbarrier_arrive_expect_tx(bar, SMEM_A_PER_STAGE + SMEM_B_PER_STAGE);\n",
      "                        mbarrier_arrive_expect_tx(bar, SMEM_A_PER_STAGE + SMEM_B_PER_STAGE);\n"
      "                        if (tr_first_) tr_[18] = clock64();\n")],
    [("kb * BLOCK_K, l.a_row);\n",
      "kb * BLOCK_K, l.a_row);\n                        if (tr_first_) tr_[19] = clock64();\n"),
     ("kb * BLOCK_K, a_row);\n",
      "kb * BLOCK_K, a_row);\n                        if (tr_first_) tr_[19] = clock64();\n")],
    [("                        Staging::store(&tmap_c, stage, w.n_block * BLOCK_N, wg_row_base);\n",
      "                        Staging::store(&tmap_c, stage, w.n_block * BLOCK_N, wg_row_base);\n"
      "                        if (threadIdx.x == 128 && ntiles_ == 1) tr_[6] = clock64();\n")],
    [("            if (threadIdx.x % kWarpgroupThreads == 0) tma_store_wait<0>();   // before smem goes away\n",
      "            if (threadIdx.x == 128) tr_[7] = clock64();\n"
      "            if (threadIdx.x % kWarpgroupThreads == 0) tma_store_wait<0>();   // before smem goes away\n"
      "            if (threadIdx.x == 128) { tr_[8] = clock64(); tr_[9] = fp8_gtimer(); }\n")],
]
# Session 14's ordering of the two consumer warpgroups' wgmma issue (tools/exp_general.py "order_rev").
ORDER = {"                        wgmma_fence_operands(acc);\n                        wgmma_fence();":
         "if (math_wg == 0) named_barrier_sync(4, 256);\n                        wgmma_fence_operands(acc);\n"
         "                        wgmma_fence();",
         "                        wgmma_commit_group();\n                        return stage;":
         "                        wgmma_commit_group();\nif (math_wg == 1) named_barrier_sync(4, 256);\n"
         "                        return stage;"}

_orig_flatten = compiler.flatten
_modules = []


def traced_flatten(extra):
    def flatten(variant):
        src = _orig_flatten(variant)
        if variant != GEN:
            return src
        for alternatives in EDITS:
            for alt in alternatives:
                pairs = alt if isinstance(alt, list) else [alt]     # a list: several edits together
                if all(src.count(old) == 1 for old, _ in pairs):
                    for old, new in pairs:
                        src = src.replace(old, new)
                    break
            else:
                raise AssertionError(f"no anchor of {alternatives[0]!r} found once")
        for old, new in extra.items():
            assert src.count(old) == 1, old
            src = src.replace(old, new)
        return HEADER + src
    return flatten


def main():
    import cupy
    import torch

    from fp8gemm.bench.timing import L2Flush, time_calls
    from fp8gemm.launcher import plan

    shapes = [(512, 4096, 4096), (512, 4096, 512), (4096, 4096, 4096)]
    if "--shapes" in sys.argv:
        shapes = [tuple(int(v) for v in x.split("x")) for x in sys.argv[sys.argv.index("--shapes") + 1].split(",")]
    stages = int(sys.argv[sys.argv.index("--stages") + 1]) if "--stages" in sys.argv else 6
    extra = ORDER if "--order" in sys.argv else {}
    # Keep each compiled module so that its trace buffer can be read.
    def build(cp, variant, name, smem_bytes, in_memory=False):
        module = cp.RawModule(code=compiler.flatten(variant), options=compiler.NVRTC_OPTIONS, name_expressions=[name])
        kern = module.get_function(name)
        if smem_bytes > 48 * 1024:
            kern.max_dynamic_shared_size_bytes = smem_bytes
        kern.compile()
        _modules.append(module)
        return kern
    compiler._build = build
    flush = L2Flush()
    for m, n, k in shapes:
        a, b, sa, sb, prob = torch_problem(m, n, k)
        cand = Candidate(GEN, block_n=128, stages=stages, group_m=8)
        runners = {}
        for label, flat in (("plain", lambda v: _patch_only(v, extra)), ("traced", traced_flatten(extra))):
            compiler.flatten = flat
            compiler._kernels.clear()
            runners[label] = plan(prob, cand, smem_bytes_of(cand, prob.out_dtype), n, True)
        compiler.flatten = _orig_flatten
        module = _modules[-1]
        outs = {lb: torch.empty(m, n, dtype=torch.bfloat16, device="cuda") for lb in runners}
        fns = {lb: (lambda r=r, o=outs[lb]: r.run(o.data_ptr(), torch.cuda.current_stream().cuda_stream))
               for lb, r in runners.items()}
        torch.cuda.synchronize()
        us = time_calls(fns, flush, 10)
        # One traced launch after an L2 flush, its stamps read back.
        ptr = module.get_global("fp8_trace")
        buf = cupy.ndarray((2048 * SLOTS,), dtype=cupy.uint64, memptr=ptr)
        buf.fill(0)
        stream = torch.cuda.current_stream().cuda_stream
        flush(stream)
        fns["traced"]()
        torch.cuda.synchronize()
        tr = buf.get().reshape(2048, SLOTS).astype(np.int64)
        used = tr[:, 1] > 0
        tr = tr[used]
        cyc_per_ns = (tr[:, 8] - tr[:, 0]) / np.maximum(tr[:, 9] - tr[:, 1], 1)
        ns = lambda c: c / cyc_per_ns                      # noqa: E731  cycles -> ns, per CTA
        rows = [
            ("entry skew (globaltimer, from the first CTA)", tr[:, 1] - tr[:, 1].min()),
            ("entry -> thread 0 ring initialised", ns(tr[:, 14] - tr[:, 0])),
            ("entry -> consumer before setmaxnreg", ns(tr[:, 20] - tr[:, 0])),
            ("entry -> producer after setmaxnreg", ns(tr[:, 15] - tr[:, 0])),
            ("entry -> producer scheduler built", ns(tr[:, 16] - tr[:, 0])),
            ("entry -> producer first unit located", ns(tr[:, 17] - tr[:, 0])),
            ("entry -> producer expect_tx done", ns(tr[:, 18] - tr[:, 0])),
            ("entry -> producer A load issued", ns(tr[:, 19] - tr[:, 0])),
            ("entry -> producer's first TMA issued", ns(tr[:, 2] - tr[:, 0])),
            ("entry -> consumers start (after scheduler)", ns(tr[:, 3] - tr[:, 0])),
            ("entry -> first full stage (wg 0)", ns(tr[:, 4] - tr[:, 0])),
            ("entry -> first full stage (wg 1)", ns(tr[:, 12] - tr[:, 0])),
            ("first TMA issued -> first full stage", ns(tr[:, 4] - tr[:, 2])),
            ("first tile: first full -> K loop end", ns(tr[:, 5] - tr[:, 4])),
            ("first tile: K loop end -> TMA store issued", ns(tr[:, 6] - tr[:, 5])),
            ("last K loop end -> final wait begins", ns(tr[:, 7] - tr[:, 11])),
            ("final store wait", ns(tr[:, 8] - tr[:, 7])),
            ("entry -> exit (CTA)", ns(tr[:, 8] - tr[:, 0])),
            ("exit (globaltimer) from the first entry", tr[:, 9] - tr[:, 1].min()),
            ("producer's last TMA issue -> exit", ns(tr[:, 8] - tr[:, 13])),
        ]
        tiles = tr[:, 10]
        print(f"\n{m}x{n}x{k} stages {stages}{' order' if extra else ''}: CUPTI plain {us['plain']:.2f} us, "
              f"traced {us['traced']:.2f} us; {used.sum()} CTAs, tiles per CTA {tiles.min()}-{tiles.max()}, "
              f"clock {np.median(cyc_per_ns):.3f} GHz")
        for label, v in rows:
            print(f"  {label:46} median {np.median(v):8.0f} ns   min {v.min():8.0f}   max {v.max():8.0f}")
        if "--per-tile" in sys.argv:
            print("  K loop per tile (ns, first tile):", np.percentile(ns(tr[:, 5] - tr[:, 4]), [10, 50, 90]))


def _patch_only(variant, extra):
    src = _orig_flatten(variant)
    if variant != GEN:
        return src
    for old, new in extra.items():
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    return src


if __name__ == "__main__":
    main()
