"""MoE L1/L2 experiments (issue 8) at DeepSeek-V4-Flash width (256 experts, H 4096, I 2048), uniform
routing: device time (CUPTI, L2 cold, median over interleaved rounds: every variant once per round,
so clock drift hits all alike) of

* the grouped L1 unfused (FP32 h promoted per 128-K block) and fused (SwiGLU + requantization in
  its epilogue), with ablations of the fused epilogue by source edits;
* the grouped L1 (FP32) and L2 (bf16) as shipped (a consumer warpgroup whose 64 rows all lie past
  its group's end does no wgmma, in groups of one token tile) and with that skip off in grouped
  mode (``_noskip``; bench/NOTES.md session 8).

Ablated variants compute wrong values: timing only. ``--only a,b`` keeps those variants;
``--profile`` runs each kept variant twice (warm-up, then the one to read) without timing, for
``ncu --kernel-name regex:sm90_fp8_gemm_general``.
Usage: PYTHONPATH=. python tools/exp_swiglu.py [--rounds R] [--only A,B] [--profile] [TOKENS ...]
(default tokens: 2048 8192)"""
import sys

import numpy as np
import torch

from fp8gemm import compiler, output
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch.selector import grouped_candidate, grouped_smem_bytes, swiglu_candidate
from fp8gemm.intake import intake
from fp8gemm.launcher import plan_grouped, plan_swiglu
from fp8gemm.validate import validate_grouped

SWIGLU = "return x / (1.0f + expf(-x)) * u;"           # common/quant.cuh: quant::swiglu_clamped
# the idle-warpgroup skip off in grouped mode (as at 16b36c4); shipped: on in groups of one tile
NO_GROUPED_SKIP = {"const bool lone_tile = !kGrouped || tile_prefix[t.group + 1] - tile_prefix[t.group] == 1;":
                   "const bool lone_tile = !kGrouped;"}
FUSED = {
    "fused": {},
    "fused_fastmath": {SWIGLU: "return __fdividef(x, 1.0f + __expf(-x)) * u;"},
    "fused_cheap_math": {SWIGLU: "return gate + up;"},
    # never runs, but the compiler cannot know: the promotion stays
    "fused_epilogue_never": {"swiglu_quant_epilogue(total, sub,":
                             "if (row0 > 0xfffffff0u) swiglu_quant_epilogue(total, sub,"},
}
_orig = compiler.flatten


def patched(edits):
    def flatten(variant):
        src = _orig(variant)
        for old, new in edits.items():
            assert old in src, old
            src = src.replace(old, new)
        return src
    return flatten


_keep = []     # the compiled kernels of every variant: a plan holds only the function pointer


def with_source(edits, build):
    compiler.flatten = patched(edits)
    compiler._kernels.clear()          # cached per template arguments, not per source
    try:
        return build()
    finally:
        _keep.extend(compiler._kernels.values())
        compiler.flatten = _orig
        compiler._kernels.clear()


def main():
    argv = sys.argv[1:]
    rounds, only, profile = 10, None, "--profile" in argv
    if profile:
        argv.remove("--profile")
    if "--rounds" in argv:
        i = argv.index("--rounds")
        rounds = int(argv[i + 1])
        del argv[i:i + 2]
    if "--only" in argv:
        i = argv.index("--only")
        only = argv[i + 1].split(",")
        del argv[i:i + 2]
    tokens = [int(t) for t in argv] or [2048, 8192]
    experts, hidden, inter, top_k = 256, 4096, 2048, 6
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    w1 = torch.randint(0, 0x6F, (experts, 2 * inter, hidden), dtype=torch.uint8, device=dev, generator=g)
    s1 = torch.rand(experts, 2 * inter // 128, hidden // 128, device=dev, generator=g) * 1e-3 + 1e-3
    w2 = torch.randint(0, 0x6F, (experts, hidden, inter), dtype=torch.uint8, device=dev, generator=g)
    s2 = torch.rand(experts, hidden // 128, inter // 128, device=dev, generator=g) * 1e-3 + 1e-3
    flush = L2Flush()
    sf = output.stream_for_framework("torch")
    stream = lambda: torch.cuda.current_stream().cuda_stream  # noqa: E731
    for t in tokens:
        rng = np.random.default_rng(t)
        ids = np.argsort(-rng.gumbel(size=(t, experts)), axis=1)[:, :top_k]
        counts = np.bincount(ids.reshape(-1), minlength=experts)
        pairs = int(counts.sum())
        offsets = torch.tensor(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32), device=dev)
        xs = torch.randint(0, 0x6F, (pairs, hidden), dtype=torch.uint8, device=dev, generator=g)
        xs_scale = torch.full((pairs, hidden // 128), 1.0 / 64, device=dev)
        act = torch.randint(0, 0x6F, (pairs, inter), dtype=torch.uint8, device=dev, generator=g)
        act_scale = torch.full((pairs, inter // 128), 1.0 / 64, device=dev)
        h32 = torch.empty(pairs, 2 * inter, device=dev)
        y = torch.empty(pairs, hidden, device=dev, dtype=torch.bfloat16)

        def problem(a, b, sa, sb, out_dtype):
            return validate_grouped(*(intake(v, n, sf) for v, n in ((a, "a"), (b, "b"), (sa, "a_scale"),
                                                                  (sb, "b_scale"), (offsets, "offsets"))),
                                    None, out_dtype, False)

        def grouped_plan(gp, precise=True):
            p = gp.gemm
            active = min(experts, p.m)
            cand = grouped_candidate(p.n, p.k, p.out_dtype, experts, 2.0 * p.m / active, active)
            return plan_grouped(gp, cand, grouped_smem_bytes(cand, p.out_dtype, experts), p.n, True, precise)

        gp1 = problem(xs, w1, xs_scale, s1, "float32")
        gp2 = problem(act, w2, act_scale, s2, "bfloat16")
        builds = {}
        for skip in (True, False):
            edits = {} if skip else NO_GROUPED_SKIP
            tag = "" if skip else "_noskip"
            builds["L1_fp32" + tag] = (edits, lambda: grouped_plan(gp1, False), h32)
            builds["L2_bf16" + tag] = (edits, lambda: grouped_plan(gp2), y)
        for name, edits in FUSED.items():
            builds[name] = (edits, lambda: plan_swiglu(gp1, swiglu_candidate(experts), act_scale.data_ptr(), 10.0),
                            act)
        fns = {}
        for name, (edits, build, out) in builds.items():
            if only is None or name in only:
                plan = with_source(edits, build)
                fns[name] = (lambda p=plan, o=out: p.run(o.data_ptr(), stream()))
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        if profile:
            for name, fn in fns.items():
                print(f"T={t} profiled launch: {name}", flush=True)
                fn()
            torch.cuda.synchronize()
            continue
        per = {name: [] for name in fns}
        names = list(fns)
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            us = time_calls({n: fns[n] for n in order}, flush, 1)
            for n, v in us.items():
                per[n].append(v)
        rows_per_expert = pairs / experts
        for name in names:
            v = sorted(per[name])
            med = v[len(v) // 2]
            print(f"T={t:5d} pairs={pairs:6d} rows/expert={rows_per_expert:6.1f} {name:22} median {med:9.1f} us "
                  f"(min {v[0]:.1f}, max {v[-1]:.1f})", flush=True)


if __name__ == "__main__":
    main()
