"""Ablations of the general kernel at large M (issue 4): device time (CUPTI, L2 cold, median of
10) of the kernel as committed and of variants with one stage removed or changed by a source edit,
to find the limiter. Results are only for timing: the ablated variants compute wrong values.
Usage: PYTHONPATH=. python tools/exp_general.py [--quick] [--only NAME,NAME...] [--shapes MxNxK,...] [--cublaslt]
(--cublaslt also times cuBLASLt's block-scaled kernel, F.scaled_mm, in the same call)
       PYTHONPATH=. python tools/exp_general.py --check-sass [--only ...]   (no GPU: nvcc + cuobjdump)
--check-sass compiles each experiment's source (128 x 128 tile, 6 stages, bf16, TMA store) and
counts its QGMMA: an ablation left with none times the TMA feed alone, not the wgmma pipeline
(bench/NOTES.md session 10: ptxas deletes wgmma whose accumulators nothing reads)."""
import os
import re
import subprocess
import sys
import tempfile

from fp8gemm import compiler, output
from fp8gemm.dispatch import Candidate, smem_bytes_of

GEN = "sm90_fp8_gemm_general"
PROMOTE = "total[i] += accum[i] * (((i >> 1) & 1) ? s1 : s0);"
MMA = "Mma::mma(desc_a + step, desc_b + step, accum, k > k0 ? 1u : 0u);"
STAGGER = ("setmaxnreg_inc<kConsumerRegs>();",
           "setmaxnreg_inc<kConsumerRegs>(); if (warpgroup_idx == 2) { const long long t0 = clock64(); "
           "while (clock64() - t0 < 400) { } }")
HALF = ("for (int i = 0; i < Mma::kNumAccum; ++i) {\n                        if constexpr (kSwapAB)",
        "for (int i = 0; i < Mma::kNumAccum / 2; ++i) {\n                        if constexpr (kSwapAB)")
# The generic loop the lean one replaced (bench/NOTES.md v8). The v7 ablations below (no_mma, fadd,
# half_promote) edit that loop's text, so they run on it; no_promote removes the promotion from the
# v8 single-accumulator loop (the pipeline's floor).
OLD_LOOP = {"if constexpr (!kSwapAB) {\n                // Lean loop": "if constexpr (false) {\n                // Lean loop"}
ROLLED = {"#pragma unroll 2\n                for (uint32_t kb = w.kb_begin;": "#pragma unroll 1\n                for (uint32_t kb = w.kb_begin;"}
SINGLE = {"constexpr bool kDoubleAccum = !kFinePromotion;": "constexpr bool kDoubleAccum = false;"}
# v10 candidate (session 3, compiled clean: no C75xx, no spills; not yet timed): two K blocks per
# loop turn with both wgmma groups in flight, the per-block wait/issue gap paid once per turn.
# Region edit: (start, end) -> text replaces from start up to (not including) the next end.
PAIRS_REGION = ("                    uint32_t kb = w.kb_begin;\n                    finish(accum, issue(accum));",
                "                } else {")
PAIRS_NEW = """\
                    // Pairs: per turn, block kb into accum and block kb+1 into acc2, both groups in
                    // flight; nothing in flight across the back edge.
                    uint32_t kb = w.kb_begin;
                    const auto issue_adv = [&](float (&acc)[Mma::kNumAccum]) {
                        const uint32_t st = issue(acc);
                        ++pipe;
                        return st;
                    };
                    const auto retire = [&](float (&acc)[Mma::kNumAccum], uint32_t stage) {
                        wgmma_fence_operands(acc);
                        __syncwarp();
                        if (lane_idx == 0) mbarrier_arrive(&empty_bar[stage]);
                    };
                    {
                        const uint32_t st = issue_adv(acc2);
                        wgmma_wait<0>();
                        retire(acc2, st);
                        take_scales(kb);
                        ++kb;
                    }
                    while (true) {
                        if (kb == w.kb_end) { promote(acc2); break; }
                        const uint32_t st0 = issue_adv(accum);
                        promote(acc2);                     // block kb-1
                        take_scales(kb);
                        if (kb + 1 == w.kb_end) {
                            wgmma_wait<0>();
                            retire(accum, st0);
                            promote(accum);
                            break;
                        }
                        const uint32_t st1 = issue_adv(acc2);
                        wgmma_wait<1>();                   // block kb done, block kb+1 still runs
                        retire(accum, st0);
                        promote(accum);
                        take_scales(kb + 1);
                        wgmma_wait<0>();
                        retire(acc2, st1);
                        kb += 2;
                    }
"""
# Session 10: from v7 on, "no_promote" (SINGLE + no promotion) left ptxas no reader of the
# accumulators, and it deleted every wgmma (no QGMMA in the SASS): it timed the TMA feed alone, not
# the wgmma pipeline. The ablations below keep the accumulators live behind tests that never hold.
# v9's promotion skipped (t0 is a product of positive scales):
V9_MIN = {"const float t0 = pa0v * pbv, t1 = pa1v * pbv;":
          "const float t0 = pa0v * pbv, t1 = pa1v * pbv;\n                        if (t0 != -1.0f) return;"}
# No feed: the producer arrives on each full barrier without loading anything; the consumers run
# on stale shared memory: the wgmma + barrier pipeline without DRAM, L2 or TMA.
NO_FEED = {"mbarrier_arrive_expect_tx(bar, SMEM_A_PER_STAGE + SMEM_B_PER_STAGE);\n                        tma_load_2d(smem_a":
           "mbarrier_arrive(bar);\n                        if (kb == 0xFFFFFFFFu) tma_load_2d(smem_a",
           "tma_load_2d(b_stage, &tmap_b, bar, kb * BLOCK_K, b_row);":
           "if (kb == 0xFFFFFFFFu) tma_load_2d(b_stage, &tmap_b, bar, kb * BLOCK_K, b_row);"}
# The three scale loads per K block replaced by a kernel argument (not a constant: ptxas would then
# prove the promotion of V9_MIN dead and delete wgmma again).
NO_SCALES = {"a0 = *pa0; a1 = *pa1; b0 = *pb;\n": "a0 = swiglu_limit; a1 = swiglu_limit; b0 = swiglu_limit;\n"}
# The tile's epilogue skipped (total stays live).
NO_EPI = {"if (wg_row_base < row_limit) {             // a warpgroup wholly past M has nothing":
          "if (wg_row_base < row_limit && total[0] == -1.0f) {"}
# Session 13 (ncu: more "barrier" stalls than cuBLASLt's kernel): the lean loop's stage release
# without the __syncwarp before lane 0's arrival (each lane's wgmma wait has returned by then).
NO_SYNCWARP = {"""                        wgmma_fence_operands(acc);
                        __syncwarp();
                        if (lane_idx == 0) mbarrier_arrive(&empty_bar[stage]);""":
               """                        wgmma_fence_operands(acc);
                        if (lane_idx == 0) mbarrier_arrive(&empty_bar[stage]);"""}
# Session 14 (ncu source counters: cuBLASLt's consumers pass a 256-thread named barrier around each
# K block's wgmma issue, one warpgroup before it and the other after, so the two warpgroups issue
# in a fixed order): the same ordering on our loops. Named barrier 4 (1-3 are taken). Only for
# shapes without an idle warpgroup (no M tail): the skip path does not pass the barrier. These
# edit the kernel as it was before v21 (run them from an archive of 1176d2e): v21 has the order
# built in, and on it they would only add a second pass of the same barrier.
ORDER_PRE = "if (math_wg == 1) named_barrier_sync(4, 256);\n"
ORDER_POST = "if (math_wg == 0) named_barrier_sync(4, 256);\n"
DOUBLE_ISSUE = "                        wgmma_fence_operands(acc);\n                        wgmma_fence();"
DOUBLE_COMMIT = "                        wgmma_commit_group();\n                        return stage;"
SINGLE_ISSUE = "                        wgmma_fence_operands(accum);\n                        wgmma_fence();\n#pragma unroll\n                        for (uint32_t k = k0;"
SINGLE_COMMIT = "                        wgmma_commit_group();\n                        wgmma_wait<0>();\n                        wgmma_fence_operands(accum);\n                        if (k0 + kMmasPerGroup == kMmasPerBlock) {\n                            __syncwarp();"


def ordered(issue, commit, first=0):
    pre, post = (ORDER_PRE, ORDER_POST) if first == 0 else (ORDER_PRE.replace("== 1", "== 0"), ORDER_POST.replace("== 0", "== 1"))
    return {issue: pre + issue, commit: commit.replace("wgmma_commit_group();", "wgmma_commit_group();\n" + post, 1)}


# Session 14: the kernel's last wait for its TMA stores asks for the writes to complete
# (cp.async.bulk.wait_group), not only for the shared memory to be read (.read, CUTLASS's choice).
STORE_READ = {"tma_store_wait<0>();   // before smem goes away": "tma_store_wait_read<0>();   // before smem goes away"}


EXPERIMENTS = {
    # name: (source edits, candidate overrides)
    "base": ({}, {}),
    "nosync": (NO_SYNCWARP, {}),
    "nosync_s4": (NO_SYNCWARP, {"stages": 4}),
    "no_promote": ({PROMOTE: ";", **SINGLE}, {}),   # no QGMMA left: the TMA feed alone (see above)
    "no_mma": ({**OLD_LOOP, MMA: ";"}, {}),
    "no_mma_no_promote": ({**OLD_LOOP, MMA: ";", PROMOTE: ";"}, {}),
    "fadd": ({**OLD_LOOP, PROMOTE: "total[i] += accum[i];"}, {}),
    "half_promote": ({**OLD_LOOP, **dict([HALF])}, {}),
    "stagger": (dict([STAGGER]), {}),
    "stages4": ({}, {"stages": 4}),
    "group1": ({}, {"group_m": 1}),
    "group16": ({}, {"group_m": 16}),
    "bn64": ({}, {"block_n": 64}),
    "old_loop": (OLD_LOOP, {}),
    "rolled": (ROLLED, {}),
    "single": (SINGLE, {}),
    "pairs": ({PAIRS_REGION: PAIRS_NEW}, {}),
    "stages5": ({}, {"stages": 5}),
    "old_loop_no_promote": ({**OLD_LOOP, PROMOTE: ";"}, {}),
    "v9_min": (V9_MIN, {}),
    "v9_noscale": (NO_SCALES, {}),
    "v9_noepi": (NO_EPI, {}),
    "v9_nofeed": (NO_FEED, {}),
    "v9_nofeed_min": ({**NO_FEED, **V9_MIN}, {}),
    "order": (ordered(DOUBLE_ISSUE, DOUBLE_COMMIT), {}),
    "order_rev": (ordered(DOUBLE_ISSUE, DOUBLE_COMMIT, 1), {}),
    "single_order": ({**SINGLE, **ordered(SINGLE_ISSUE, SINGLE_COMMIT)}, {}),
    "single_order_rev": ({**SINGLE, **ordered(SINGLE_ISSUE, SINGLE_COMMIT, 1)}, {}),
    "store_read": (STORE_READ, {}),
    "order_read": ({**ordered(DOUBLE_ISSUE, DOUBLE_COMMIT, 1), **STORE_READ}, {}),
    "order_read_s4": ({**ordered(DOUBLE_ISSUE, DOUBLE_COMMIT, 1), **STORE_READ}, {"stages": 4}),
    "base_s4": ({}, {"stages": 4}),
}
SHAPES = [(4096, 4096, 4096), (8192, 8192, 4096), (2048, 7168, 2048)]

_orig_flatten = compiler.flatten


def patched(edits):
    def flatten(variant):
        src = _orig_flatten(variant)
        for old, new in edits.items():
            if isinstance(old, tuple):               # (start, end): replace the region between
                a = src.index(old[0])
                src = src[:a] + new + src[src.index(old[1], a):]
                continue
            assert old in src, old
            src = src.replace(old, new)
        return src
    return flatten


# The general kernel's parameter list (tests/test_kernels_compile.py holds the same, for its nvcc runs).
_PARAMS = ("const __grid_constant__ fp8gemm::TmaDescriptor, const __grid_constant__ fp8gemm::TmaDescriptor, "
           "const __grid_constant__ fp8gemm::TmaDescriptor, const float*, long long, long long, const float*, "
           "long long, long long, void*, long long, unsigned, unsigned, unsigned, unsigned, float*, unsigned*, "
           "const int*, unsigned, unsigned, long long, float*, float")
# NOTES: keep in step with the kernel's parameters (tests/test_kernels_compile.py GENERAL_PARAMS).


def torch_problem(m, n, k):
    """A random case as torch arrays and its validated problem (for plan())."""
    from fp8gemm.intake import intake
    from fp8gemm.testing import random_case
    from fp8gemm.validate import validate_gemm
    a, b, sa, sb = random_case(m, n, k, seed=1).as_torch()
    sf = output.stream_for_framework("torch")
    arrays = ((a, "a"), (b, "b"), (sa, "a_scale"), (sb, "b_scale"))
    return a, b, sa, sb, validate_gemm(*(intake(x, nm, sf) for x, nm in arrays), None, None)


def check_sass() -> int:
    """QGMMA count of each experiment's SASS; 1 if an ablation that should run wgmma has none."""
    targs = (128, 6, 0, 8, "false", "true", "false")
    expected_empty = {"no_mma", "no_mma_no_promote", "no_promote", "old_loop_no_promote"}
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, (edits, over) in EXPERIMENTS.items():
            if over:                              # other tiles / stages: same loop as base
                continue
            src = os.path.join(tmp, "k.cu")
            with open(src, "w") as f:
                f.write(patched(edits)(GEN) + f"\ntemplate __global__ void "
                        f"{compiler.kernel_name(GEN, targs)}({_PARAMS});\n")
            cubin = os.path.join(tmp, "k.cubin")
            res = subprocess.run(["nvcc", "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17",
                                  "-o", cubin, src], capture_output=True, text=True)
            if res.returncode:
                print(f"{name:22} does not compile:\n{res.stderr[-2000:]}")
                bad = 1
                continue
            sass = subprocess.run(["cuobjdump", "-sass", cubin], capture_output=True, text=True).stdout
            count = len(re.findall(r"\bQGMMA\.", sass))
            note = ""
            if count == 0:
                note = "no wgmma left: times the TMA feed alone" + ("" if name in expected_empty else "  <-- UNEXPECTED")
                bad |= name not in expected_empty
            print(f"{name:22} QGMMA {count:3d}  {note}", flush=True)
    return bad


def main():
    shapes = SHAPES[:2] if "--quick" in sys.argv else SHAPES
    if "--shapes" in sys.argv:
        shapes = [tuple(int(v) for v in x.split("x")) for x in sys.argv[sys.argv.index("--shapes") + 1].split(",")]
    if "--only" in sys.argv:
        keep = sys.argv[sys.argv.index("--only") + 1].split(",")
        for name in list(EXPERIMENTS):
            if name not in keep:
                del EXPERIMENTS[name]
    if "--check-sass" in sys.argv:
        return check_sass()
    import torch

    from fp8gemm.bench.timing import L2Flush, time_calls
    from fp8gemm.launcher import plan

    flush = L2Flush()
    rows = []
    for m, n, k in shapes:
        a, b, sa, sb, prob = torch_problem(m, n, k)
        fns = {}
        for name, (edits, over) in EXPERIMENTS.items():
            compiler.flatten = patched(edits)
            compiler._kernels.clear()          # cached per template arguments, not per source
            cand = Candidate(GEN, **{"block_n": 128, "stages": 6, "group_m": 8, **over})
            # Plan (and compile) this variant once, then time only its launches.
            runner = plan(prob, cand, smem_bytes_of(cand, prob.out_dtype), n, True)
            out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
            fns[name] = (lambda r=runner, o=out: r.run(o.data_ptr(), torch.cuda.current_stream().cuda_stream))
        compiler.flatten = _orig_flatten
        peer = {}
        if "--cublaslt" in sys.argv:                 # cuBLASLt's block-scaled kernel, same call
            import torch.nn.functional as F
            kb = sa.shape[1]
            sb_store = torch.zeros((sb.shape[0], -(-kb // 4) * 4), dtype=torch.float32, device="cuda")
            sb_store[:, :kb] = sb
            sa_mm = sa.t().contiguous().t()
            peer["cublaslt"] = lambda: F.scaled_mm(a, b.t(), scale_a=sa_mm, scale_recipe_a=F.ScalingType.BlockWise1x128,
                                                   scale_b=sb_store[:, :kb].t(),
                                                   scale_recipe_b=F.ScalingType.BlockWise128x128,
                                                   output_dtype=torch.bfloat16)
        torch.cuda.synchronize()
        t = time_calls({**fns, **peer}, flush, 10)
        outs = {}
        for name, fn in fns.items():                 # agreement with the committed kernel
            fn()
            torch.cuda.synchronize()
            outs[name] = fn.__defaults__[1].float()
        for name in fns:
            d = (outs[name] - outs["base"]).norm() / outs["base"].norm() if "base" in outs else float("nan")
            print(f"{m:6} {n:6} {k:6} {name:18} rel. diff from base {float(d):.2e}", flush=True)
        for name, us in t.items():
            tf = 2.0 * m * n * k / us / 1e6
            rows.append((m, n, k, name, us, tf))
            print(f"{m:6} {n:6} {k:6} {name:18} {us:9.2f} us {tf:7.1f} TFLOP/s", flush=True)
    names = list(EXPERIMENTS) + (["cublaslt"] if "--cublaslt" in sys.argv else [])
    print("\nM N K | " + " | ".join(names))
    for m, n, k in shapes:
        vals = {r[3]: r[4] for r in rows if r[:3] == (m, n, k)}
        print(f"{m} {n} {k} | " + " | ".join(f"{vals[e]:.1f}" for e in names))


if __name__ == "__main__":
    sys.exit(main())
