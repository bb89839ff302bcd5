"""Lab (issue 27): the general kernel's two accumulators in turn against one accumulator waited
and promoted per K block (the form of DeepGEMM's 1D2D loop: issue, wait, release the stage,
promote), on the trace's mid-M shapes where DeepGEMM leads per K block (lab/k_sweep.py). The
general kernel's source is patched in this process (PATCH, comma-separated; none: as committed;
simple: one accumulator; simple2: the same unrolled by 2; feed: no wgmma at all, so that the time
is the TMA feed's and the barriers' alone; noscale: the consumers' scale loads replaced by 1.0;
hint: every TMA load with an explicit L2 cache hint, evict-normal, as DeepGEMM issues them;
pfD, D a number: every K block's scale loads also prefetch into L1 the scales D blocks on;
ringD: the consumers' scale loads replaced by a per-warp shared ring of D K blocks, each filled by
cp.async D blocks ahead (lanes 0-15: the warp's 16 rows' As, lane 16: the Bs) and read after
cp.async.wait_group D - 1 (a counted wait, not the load scoreboard's wait for zero), plain GEMM
with the consumers' loads only (host side: General.smem_bytes grows by the rings);
results meaningless under feed / noscale), and the launch changed (GRID=sms: one CTA per SM even
where fewer tiles; CARVEOUT=percent: the kernels' preferred shared-memory carve-out), the tiles
forced (TILES=feed: a ring depth sweep), DeepGEMM's fp8_gemm_nt beside them as the yardstick
across processes. SCALES=copy: the producer warp copies both scales into the stage slots where
the consumers would load them (the kernel's kScaleCopy); SCALES=window: both scales by TMA in
windows of 32 K blocks, once per window (kScaleWindow), where the windows fit on any tile;
SCALES=loads: the consumers' loads where the dispatcher would pick the windows; PATCH=ahead: the
lean loop polls the next stage's full barrier before its wgmma wait, not after, on every tile
(the kernel's kPollAhead, committed on windowed 128-column tiles only; noahead: on none); ASCALE=m-major: fp8gemm gets As M-major
(quantize_per_token_group(m_major_scales=True)'s layout, As by TMA into the slots). CUPTI, L2
flushed, median of ITERS rounds in turns.
Usage: PATCH=simple python lab/simple_loop.py OUT.json"""
import json
import os
import sys

import torch

import fp8gemm
from fp8gemm import compiler
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import GemmDesc, General, is_valid
from fp8gemm.testing import random_case

BEGIN = "                    uint32_t kb = w.kb_begin;\n                    {\n"
END = "                } else {\n                // NOTES: unrolled by 2"
ONE_ACC = """                    {pragma}
                    for (uint32_t kb = w.kb_begin; kb < w.kb_end; ++kb) {{
                        const uint32_t st = issue(accum, kb == w.kb_begin);
                        take_scales(kb, st);
                        finish(accum, st, kb + 1 < w.kb_end);
                        promote(accum);
                    }}
                    (void)acc2;
                }} else {{
                // NOTES: unrolled by 2"""
MMA = "Mma::mma(smem_desc_from_lo(lo_a + kstep), smem_desc_from_lo(lo_b + kstep), acc, k > 0 ? 1u : 0u);"
PATCH = [p for p in os.environ.get("PATCH", "none").split(",") if p != "none"]
NOSCALE = [("const float na0 = *pa0, na1 = *pa1, nb0 = *pb;", "const float na0 = 1.0f, na1 = 1.0f, nb0 = 1.0f;", 1),
           ("a0 = *pa0; a1 = *pa1;", "a0 = 1.0f; a1 = 1.0f;", 3), ("b0 = *pb;", "b0 = 1.0f;", 3)]
TMA_LOAD = '''"cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];"
        ::"r"(smem_addr(smem_dst)), "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(bar)),
          "r"(c0), "r"(c1)'''
TMA_LOAD_HINT = '''"cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%3, %4}], [%2], %5;"
        ::"r"(smem_addr(smem_dst)), "l"(reinterpret_cast<uint64_t>(desc)), "r"(smem_addr(bar)),
          "r"(c0), "r"(c1), "l"(0x1000000000000000ull)'''
LEAN_LOAD = "                            if (kb + 1 < w.kb_end) {\n                                if constexpr (!kSlotsA) { a0 = *pa0; a1 = *pa1; }\n"
STEP_LOAD = "                            const int64_t step = kb + 1 < w.kb_end ? 1 : 0;\n"
PREFETCH = """                            if (kb + {d} < w.kb_end) {{   // the pointers are one block on
                                const auto pf = [](const float* q) {{ asm volatile("prefetch.global.L1 [%0];" ::"l"(__cvta_generic_to_global(q))); }};
                                if constexpr (!kSlotsA) {{ pf(pa0 + {d1} * sa_stride_k); pf(pa1 + {d1} * sa_stride_k); }}
                                if constexpr (!kSlotsB) pf(pb + {d1} * sb_stride_k);
                            }}
"""
PREFETCH0 = PREFETCH.replace("{d1}", "{d}").replace("   // the pointers are one block on", "")
RING_INIT_ANCHOR = """                if constexpr (!kSlotsA) { a0 = *pa0; a1 = *pa1; }
                if constexpr (!kSlotsB) b0 = *pb;
"""
RING_INIT = """                // lab ring: this warp's ring after the flags word, kRing slots of 32 floats
                constexpr uint32_t kRing = {d};
                float* ring = reinterpret_cast<float*>(smem.tail) + (consumer_tid / 32) * kRing * 32;
                const uint32_t ring_row = min(t.row_base + math_wg * kWgmmaM + warp_in_wg * 16 + (lane_idx % 16), row_limit - 1);
                const float* ring_src = lane_idx < 16 ? a_scale + static_cast<int64_t>(ring_row) * sa_stride_m
                                                      : sb_row;
                const int64_t ring_step = lane_idx < 16 ? sa_stride_k : sb_stride_k;
                const auto ring_copy = [&](uint32_t target) {{
                    if (lane_idx <= 16 && target < w.kb_end) {{
                        float* dst = ring + ((target - w.kb_begin) % kRing) * 32 + (lane_idx < 16 ? lane_idx : 16u);
                        const float* src = ring_src + static_cast<int64_t>(target) * ring_step;
                        asm volatile("cp.async.ca.shared::cta.global [%0], [%1], 4;" ::"r"(smem_addr(dst)),
                                     "l"(__cvta_generic_to_global(src)) : "memory");
                    }}
                    asm volatile("cp.async.commit_group;" ::: "memory");
                }};
                if constexpr (kScaleTma == kScaleLoads && !kSwiGLU && !kFinePromotion) {{
#pragma unroll
                    for (uint32_t j = 0; j < kRing; ++j) ring_copy(w.kb_begin + j);
                }} else {{
                if constexpr (!kSlotsA) {{ a0 = *pa0; a1 = *pa1; }}
                if constexpr (!kSlotsB) b0 = *pb;
                }}
"""
RING_TAKE_ANCHOR = """                        pa0v = a0; pa1v = a1; pbv = b0;
                        // kSwiGLU: the up rows' scale is loaded here"""
RING_TAKE = """                        if constexpr (kScaleTma == kScaleLoads && !kSwiGLU) {
                            const float* slot = ring + ((kb - w.kb_begin) % kRing) * 32;
                            asm volatile("cp.async.wait_group %0;" ::"n"(kRing - 1) : "memory");
                            __syncwarp();
                            pa0v = slot[lane_idx / 4]; pa1v = slot[lane_idx / 4 + 8]; pbv = slot[16];
                            __syncwarp();
                            ring_copy(kb + kRing);
                            (void)stage;
                            return;
                        }
""" + RING_TAKE_ANCHOR
# ahead / noahead: the lean loop's finish() polls the next stage's full barrier before its wgmma
# wait (the kernel's kPollAhead) on every tile / on none; as committed, on windowed 128-column tiles.
POLL_AHEAD = "constexpr bool kPollAhead = kWindow && BLOCK_N == 128;"
# oldlean: the lean barrier forms only where they were before (64-row tiles of 64+ columns, scale
# slots or windows); oldloads: the consumers' loads a block ahead, the pending registers copied
# from them (both together: the loop as it was before kLoadsInBlock). Anchored on the measured
# tree (source hash 5a1787d1: lean forms and in-block loads on every loads tile); the committed
# kernel chooses them by kScaleTma, so these asserts fail there.
LEAN = "constexpr bool kLean = true;"
OLD_LEAN = "constexpr bool kLean = (kConsumers == 1 && BLOCK_N >= 64) || kScaleTma != kScaleLoads;"
LOADS_IN_BLOCK = "constexpr bool kLoadsInBlock = kScaleTma == kScaleLoads;"
_flatten = compiler.flatten


def patched(variant):
    s = _flatten(variant)
    if variant != General.variant:
        return s
    if "feed" in PATCH:
        assert s.count(MMA) == 1, "the patch's anchor moved"
        s = s.replace(MMA, "(void)kstep;")
    if "hint" in PATCH:
        assert s.count(TMA_LOAD) == 1, "the patch's anchor moved"
        s = s.replace(TMA_LOAD, TMA_LOAD_HINT)
    for d in [int(p[2:]) for p in PATCH if p.startswith("pf")]:
        assert s.count(LEAN_LOAD) == 1 and s.count(STEP_LOAD) == 1, "the patch's anchors moved"
        s = s.replace(LEAN_LOAD, PREFETCH.format(d=d, d1=d - 1) + LEAN_LOAD)
        s = s.replace(STEP_LOAD, PREFETCH0.format(d=d) + STEP_LOAD)
    for d in [int(p[4:]) for p in PATCH if p.startswith("ring")]:
        assert s.count(RING_INIT_ANCHOR) == 1 and s.count(RING_TAKE_ANCHOR) == 1, "the patch's anchors moved"
        s = s.replace(RING_INIT_ANCHOR, RING_INIT.format(d=d)).replace(RING_TAKE_ANCHOR, RING_TAKE)
    for p in ("ahead", "noahead"):
        if p in PATCH:
            assert s.count(POLL_AHEAD) == 1, "the patch's anchor moved"
            s = s.replace(POLL_AHEAD, "constexpr bool kPollAhead = kLean;" if p == "ahead" else
                          "constexpr bool kPollAhead = false;")
    if "oldlean" in PATCH:
        assert s.count(LEAN) == 1, "the patch's anchor moved"
        s = s.replace(LEAN, OLD_LEAN)
    if "oldloads" in PATCH:
        assert s.count(LOADS_IN_BLOCK) == 1, "the patch's anchor moved"
        s = s.replace(LOADS_IN_BLOCK, "constexpr bool kLoadsInBlock = false;")
    if "noscale" in PATCH:
        for old, new, n in NOSCALE:
            assert s.count(old) == n, "the patch's anchor moved"
            s = s.replace(old, new)
    if "simple" in PATCH or "simple2" in PATCH:
        assert s.count(BEGIN) == 1 and s.count(END) == 1, "the patch's anchors moved"
        i, j = s.index(BEGIN), s.index(END)
        s = s[:i] + ONE_ACC.format(pragma="#pragma unroll 2" if "simple2" in PATCH else "") + s[j + len(END):]
    return s


if os.environ.get("GRID") == "sms":           # one CTA per SM: the idle ones find no unit
    from fp8gemm import launcher
    from fp8gemm.dispatch import general as _general

    def _plan_all_sms(p, kern, grid, *args, **kw):
        return launcher.Plan(p, kern, launcher.sm_count(p.device), *args, **kw)
    _general.Plan = _plan_all_sms
if os.environ.get("SCALES") == "copy":       # the scales copied into the slots, not the consumers' loads
    from fp8gemm.dispatch import general as _g
    _source = _g.scale_source

    def _copy_source(p, cand):
        got = _source(p, cand)
        fits = cand.smem_bytes(p.out_dtype, _g.SCALE_COPIED) <= _g.MAX_SMEM_PER_BLOCK
        return (_g.SCALE_COPIED,) + got[1:] if got[0] == _g.SCALE_LOADS and p.out_dtype != "float32" and fits else got
    _g.scale_source = _copy_source
if os.environ.get("SCALES") == "loads":      # the consumers' loads wherever the dispatcher picks windows
    from fp8gemm import tma as _tma
    from fp8gemm.dispatch import general as _g
    _source_l = _g.scale_source

    def _loads_source(p, cand):
        got = _source_l(p, cand)
        return (_g.SCALE_LOADS, _tma.ZERO_DESCRIPTOR, _tma.ZERO_DESCRIPTOR) if got[0] == _g.SCALE_WINDOW else got
    _g.scale_source = _loads_source
if os.environ.get("SCALES") == "window":     # both scales by TMA in windows of 32 K blocks (kScaleWindow)
    from fp8gemm.dispatch import general as _g
    _source_w = _g.scale_source

    def _window_source(p, cand):
        got = _source_w(p, cand)
        fits = cand.smem_bytes(p.out_dtype, _g.SCALE_WINDOW) <= _g.MAX_SMEM_PER_BLOCK and _g.k_major_windows_fit(p)
        return ((_g.SCALE_WINDOW,) + _g.window_maps(p, cand.block_m)
                if got[0] == _g.SCALE_LOADS and p.out_dtype != "float32" and fits else got)
    _g.scale_source = _window_source
if os.environ.get("CARVEOUT"):
    _build = compiler._build

    def _build_carveout(*args, **kw):
        kern = _build(*args, **kw)
        kern.preferred_shared_memory_carveout = int(os.environ["CARVEOUT"])
        return kern
    compiler._build = _build_carveout


compiler.flatten = patched
for _d in [int(p[4:]) for p in PATCH if p.startswith("ring")]:   # the rings' shared memory
    _smem = General.smem_bytes

    def _smem_with_rings(self, out_dtype="bfloat16", scale_slots=0, _d=_d):
        return _smem(self, out_dtype, scale_slots) + (self.block_m // 64) * 4 * _d * 128
    General.smem_bytes = _smem_with_rings

SHAPES = [(64, 4096, 4096), (128, 4096, 4096), (128, 4096, 8192), (64, 8192, 4096), (256, 1536, 4096),
          (256, 4096, 4096), (512, 4096, 4096), (4096, 4096, 4096)]
TILES = [General(32, 8, 8, 1, 64), General(32, 16, 8, 1, 64), General(64, 6, 8, 1, 64), General(64, 12, 8, 1, 64),
         General(64, 13, 8, 1, 64), General(128, 8, 8, 1, 64), General(64, 6), General(128, 5)]
if os.environ.get("TILES") == "feed":
    SHAPES = [(128, 4096, 8192), (64, 8192, 4096), (512, 4096, 4096), (4096, 4096, 4096)]
    TILES = [General(64, s, 8, 1, 64) for s in (4, 6, 9, 13)] + [General(32, s, 8, 1, 64) for s in (8, 16)] + \
        [General(128, s) for s in (3, 5)]


def main(out):
    try:
        import deep_gemm  # noqa: F401

        from fp8gemm.bench.peers import Inputs, prepare_deepgemm
        from fp8gemm.bench.warm import warm
        warm([{"kind": "deepgemm_gemm", "m": m, "n": n, "k": k} for m, n, k in SHAPES])
    except ImportError:
        prepare_deepgemm = None
    fns, keep = {}, []
    for m, n, k in SHAPES:
        case = random_case(m, n, k, seed=1)
        keep.append(case)
        a, b, sa, sb = case.as_torch()
        if os.environ.get("ASCALE") == "m-major":
            from fp8gemm.bench.cli import m_major_copy
            sa = m_major_copy(sa)
        ref = None
        for c in TILES:
            if (os.environ.get("TILES") != "feed" and (c.block_m == 128) != (m >= 256)) or \
                    not is_valid(GemmDesc(m, n, k), c):
                continue
            f = (lambda a=a, b=b, sa=sa, sb=sb, c=c: fp8gemm.matmul(a, b, sa, sb, config=c))
            got = f().float()
            if ref is None and not ("feed" in PATCH or "noscale" in PATCH):   # the first tile against float64
                import cupy

                from fp8gemm.reference import rel_fro_error
                err = rel_fro_error(cupy.from_dlpack(got).astype(cupy.float64), case.reference(xp=cupy))
                assert err <= 4e-3, f"{m}x{n}x{k} {c.label()}: relative Frobenius error {err:.2e}"
            ref = got if ref is None else ref
            assert "feed" in PATCH or "noscale" in PATCH or torch.equal(got, ref), f"{m}x{n}x{k} {c.label()}: not bitwise the first tile's result"
            fns[f"{m}x{n}x{k} {c.label()}"] = f
        fns[f"{m}x{n}x{k} auto"] = (lambda a=a, b=b, sa=sa, sb=sb: fp8gemm.matmul(a, b, sa, sb))
        if prepare_deepgemm is not None:
            fns[f"{m}x{n}x{k} deepgemm"] = prepare_deepgemm(Inputs(case, "bfloat16"))["fp8_gemm_nt"]
    torch.cuda.synchronize()
    us = time_calls(fns, L2Flush(), int(os.environ.get("ITERS", "15")))
    for label, v in us.items():
        print(f"{'+'.join(PATCH) or 'none':8} {label:60} {v:9.2f}")
    with open(out, "w") as fh:
        json.dump(us, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
