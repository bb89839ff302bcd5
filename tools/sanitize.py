"""Correctness run for compute-sanitizer (memcheck, racecheck, synccheck, initcheck): every kernel
variant and mode the dispatcher can pick (and the forced-only ones), once each on small shapes
with M, N and K tails, each checked against the float64 reference. tools/sanitize_all.py runs the
four tools over it and fails on any error.

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 tools/sanitize.py [--only TAGS]
        [--shard I/N] [--list]

--only TAGS   comma-separated: a case runs if it carries any of them (TAGS below; the old
              --general-only, --gemv-only, --wg3-only, --grouped-only, --moe-only and
              --quantizer-only select the same cases as before).
--shard I/N   every N-th case of the selection from the I-th (0-based): one tool's run split
              over processes.
--list        print the selected cases and exit (no GPU).

Exit status 1 if an output is wrong; the sanitizer's own exit code reports what it found.
NOTES: the shapes are small because racecheck runs every shared-memory access through its
checker; a case that needs CTAs to run several work units each (the split-K flag's reuse, the
staging buffer's reuse between tiles) says so in its description, and has more units than the
132 SMs of an H100 / H200.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

import fp8gemm
from fp8gemm import reference
from fp8gemm.dispatch import Dense, General, Gemv, ShortK, SwapAB, Wg3
from fp8gemm.dispatch import dense as dense_k_major
from fp8gemm.dispatch.general import TAIL_SPLIT

TOL = {"bfloat16": 4e-3, "float16": 1e-3, "float32": 1e-4}
TAGS = ("quantizer", "general", "split", "swap_ab", "short_k", "gemv", "wg3", "dense", "grouped", "moe")


@dataclass(frozen=True)
class Gemm:
    """One fp8gemm.matmul call: C[M, N] of ``dt`` with ``config`` forced (None: the dispatcher's
    pick); ``as_layout`` "m" passes As M-major (the As slots / TMA scale paths), "k" row-major."""
    m: int
    n: int
    k: int
    dt: str
    config: object
    what: str
    as_layout: str = "k"
    tags: tuple = field(default=(), compare=False)

    def label(self) -> str:
        return f"M={self.m} N={self.n} K={self.k} {self.dt:8} As {self.as_layout}-major  {self.what}"


def _split(c) -> tuple:
    return ("split",) if getattr(c, "splits", 1) != 1 else ()


def _g(m, n, k, dt, c, what, as_layout="k"):
    return Gemm(m, n, k, dt, c, what, as_layout, ("general",) + _split(c))


# The general kernel, one case per mode its plan can take (tests/test_sanitize.py checks that the
# template arguments these cases reach cover every scale source, store path and tile height).
GENERAL = [
    _g(200, 300, 1040, "bfloat16", General(128, 4, 8), "two accumulators, direct store (N*2 % 16 != 0), M/N/K tails"),
    _g(200, 304, 1040, "bfloat16", General(128, 4, 8), "swizzled TMA store, M/N/K tails"),
    _g(200, 300, 1040, "float32", General(128, 4, 8), "fine promotion (fp32), swizzled TMA store"),
    _g(60, 300, 1040, "bfloat16", General(128, 4, 8), "a warpgroup wholly past M passes the issue-order barrier"),
    _g(130, 520, 2064, "float16", General(128, 6, 8), "issue-order barrier: last row tile's second warpgroup idle"),
    _g(300, 520, 1040, "bfloat16", General(16, 4, 8), "narrow TMA store (32 B rows), last A box moved up"),
    _g(130, 264, 1040, "float32", General(8, 4, 8), "narrow TMA store, fp32 (32 B rows)"),
    _g(70, 1000, 1040, "bfloat16", General(8, 4, 8), "narrow TMA store (16 B rows), 125 tiles"),
    # scale sources (dispatch/general.py: scale_source, chunk_blocks)
    _g(200, 304, 1040, "bfloat16", General(128, 4, 8), "As by TMA into stage slots (kScaleTma)", "m"),
    _g(100, 300, 1040, "float16", General(64, 8, 8, 1, 64), "64-row tiles, As slots", "m"),
    _g(150, 304, 4592, "bfloat16", General(128, 4, 8), "scale windows (kScaleWindow), poll ahead, K tail"),
    _g(100, 304, 4592, "bfloat16", General(128, 6, 8, 1, 64), "64 x 128 tiles, scale windows"),
    _g(150, 304, 8192, "float16", General(64, 4, 8, 2), "scale windows under split-K (a window per unit)"),
    _g(200, 304, 1008, "bfloat16", General(128, 3, 8), "scale loads in block (units of <= 8 K blocks)"),
    _g(200, 304, 1008, "bfloat16", General(128, 4, 8), "chunked K loop, chunks of 8 (kChunk)"),
    _g(100, 304, 1536, "bfloat16", General(32, 4, 8, 1, 64), "64-row tiles, chunks of 4"),
    _g(70, 304, 2048, "bfloat16", General(64, 4, 8, 2), "chunks of 8 under split-K"),
    # split-K (split_k.cuh) and its epilogues
    _g(130, 200, 2064, "float16", General(32, 4, 8, 4), "split-K, narrow TMA store (64 B rows)"),
    _g(100, 256, 272, "bfloat16", General(64, 4, 8, 4), "empty K splits"),
    _g(3, 1000, 2064, "float16", General(16, 3, 1, 16),
       "split-K, 16 splits, N tail: 1008 units, several per CTA (issue 58's case)"),
    _g(100, 1000, 2064, "bfloat16", General(16, 4, 8, 16), "split-K, several units per CTA, both warpgroups store"),
    _g(40, 1000, 2064, "float32", General(16, 8, 8, 16, 64), "64-row tiles, split-K, several units per CTA, fp32"),
    _g(70, 264, 2064, "float32", General(32, 4, 8, 4), "fine promotion under split-K"),
    _g(70, 300, 1552, "bfloat16", General(128, 4, 8, 5), "split-K, 128-wide tile: one split per load chunk"),
    _g(300, 1000, 2048, "bfloat16", General(64, 4, 8, TAIL_SPLIT), "tail split: the last wave's tiles split"),
    _g(64, 4096, 4096, "bfloat16", None, "dispatcher's pick"),
]
SWAP_AB = [Gemm(*c, tags=("swap_ab",) + _split(c[4])) for c in [
    (5, 300, 1040, "bfloat16", SwapAB(8, 4, 8, splits=3), "swap-AB split-K"),
    (37, 200, 528, "float32", SwapAB(16, 4, 8), "swap-AB, fine promotion"),
    (1, 512, 4096, "bfloat16", SwapAB(8, 6, 1, splits=8),
     "swap-AB split-K at M = 1: threads with no token skip the workspace"),
    (5, 300, 1040, "float32", SwapAB(8, 6, 1, splits=2), "swap-AB, weight box moved up"),
    (50, 300, 1040, "float16", SwapAB(64, 4, 8), "swap-AB, 64-token tiles"),
    (9, 4096, 2064, "bfloat16", SwapAB(16, 4, 8, splits=8), "swap-AB split-K, 256 units: several per CTA"),
    # since session 45: one consumer warpgroup (64-row tiles), and the raw split as a cluster whose
    # CTAs read each other's shared memory
    (9, 300, 1040, "float32", SwapAB(16, 10, 1, 3, 64), "swap-AB 64-row tiles, split"),
    (20, 1000, 1040, "bfloat16", SwapAB.cluster_tile(16, 8, 1040, "bfloat16"), "swap-AB raw cluster, S=8, empty splits"),
    (5, 300, 1040, "float32", SwapAB.cluster_tile(8, 3, 1040, "float32", 64),
     "swap-AB raw cluster, 64-row tiles, S=3, fp32 (4 slots a block)"),
]]
SHORT_K = [Gemm(*c, tags=("short_k",)) for c in [
    (200, 300, 240, "bfloat16", ShortK(128, 128), "short-K, two K blocks (second partial), M/N tails"),
    (200, 304, 240, "float16", ShortK(128, 64), "short-K, TMA store"),
    (70, 100, 112, "float32", ShortK(64, 32), "short-K, one K block, fine promotion, direct store"),
]]
GEMV = [Gemm(*c, tags=("gemv",)) for c in [
    (3, 17, 4112, "bfloat16", Gemv(8, 4, 4), "gemv: N tail inside one CTA, K tail past 4 x 4 blocks in flight"),
    (16, 300, 1040, "float32", Gemv(16, 8, 1), "gemv: two token tiles, fp32, partial last CTA"),
    (8, 4096, 1024, "float16", Gemv(8, 8, 2), "gemv: fp16, 256 CTAs"),
]]
WG3 = [Gemm(*c, tags=("wg3",)) for c in [
    (200, 300, 1040, "bfloat16", Wg3(128, 3, 8), "wg3: a warpgroup wholly past M, direct store, N/K tails"),
    (200, 304, 1040, "bfloat16", Wg3(128, 3, 8), "wg3: TMA store"),
    (400, 100, 272, "float16", Wg3(64, 4, 1), "wg3: two row tiles, direct store (N tail), one partial K block"),
    (400, 304, 1040, "bfloat16", Wg3(128, 4, 8), "wg3: As by TMA into stage slots", "m"),
]]
DENSE = [Gemm(*c, as_layout="m", tags=("dense",)) for c in [   # As M-major (a TMA column per stage)
    (200, 304, 1040, "bfloat16", Dense(128, 128, 5, 1, 1, 8), "dense: 128 x 128, M/N/K tails"),
    (300, 512, 1024, "bfloat16", Dense(256, 128, 3, 2, 1, 8), "dense: 256 x 128 in CTA pairs sharing A"),
    (100, 300, 512, "float16", Dense(64, 64, 4, 1, 1, 8), "dense: 64-row tiles, direct store (N*2 % 16 != 0)"),
]] + [Gemm(*c, tags=("dense",)) for c in [    # As K-major (the 4-block window; off with FP8GEMM_DENSE_K_MAJOR=0)
    (300, 1000, 1536, "bfloat16", Dense(256, 128, 3, 2, 1, 16), "dense K-major As: 256 x 128 pairs, odd tile count"),
    (200, 304, 2048, "float16", Dense(128, 128, 5, 1, 1, 8, 1), "dense K-major As: two accumulators, TMA store"),
    (130, 520, 7168, "bfloat16", Dense(128, 64, 6, 1, 1, 8), "dense K-major As: window past K / 128 (56 blocks)"),
    # since session 38: the flat As (packed rows, K / 128 not a multiple of 4), the small-M 64-row
    # two-accumulator tiles, a straddling width, a pair sharing B
    (200, 1000, 256, "bfloat16", Dense(128, 128, 5, 1, 1, 8), "dense flat As (K / 128 = 2): one-row map runs, M tail"),
    (77, 520, 640, "bfloat16", Dense(256, 128, 3, 2, 1, 8), "dense flat As (K / 128 = 5), pairs sharing A"),
    (32, 1536, 1024, "bfloat16", Dense(64, 16, 15, 1, 0, 8, 1), "dense 64 x 16 two accumulators, small M"),
    (300, 1000, 1024, "bfloat16", Dense(128, 96, 5, 1, 1, 8), "dense 128 x 96: a tile straddles two B-scale blocks"),
    (600, 4096, 1024, "bfloat16", Dense(128, 128, 5, 2, 0, 8), "dense pairs sharing B"),
] if dense_k_major.K_MAJOR_SWITCH]
GEMMS = GENERAL + SWAP_AB + SHORT_K + GEMV + WG3 + DENSE

# Grouped GEMMs: (layout, group sizes, max_rows (masked), N, K, out dtype, config or None, what).
GROUPED = [
    ("contiguous", [10, 0, 130, 70], None, 300, 400, "bfloat16", None, "grouped, 128-row tiles, TMA + boundary stores"),
    ("contiguous", [1, 2, 0, 5, 9, 17, 3, 0, 33], None, 300, 2064, "float32", None, "grouped swap-AB, K splits"),
    ("masked", [1, 0, 3, 8, 0, 2], 8, 300, 2064, "float32", None, "grouped masked swap-AB, K splits"),
    ("masked", [0, 64, 130, 7], 200, 256, 512, "float32", None, "grouped masked, 128-row tiles"),
    ("contiguous", [70, 0, 200, 3], None, 256, 1040, "float16", General(64, 4, 8), "grouped, forced 128 x 64 tiles"),
    ("contiguous", [0, 1, 129, 192, 200, 7], None, 300, 400, "bfloat16", True,
     "grouped wg3, a group's end in every 64-row slab"),
    ("masked", [0, 64, 130, 7, 193], 200, 256, 512, "float16", True, "grouped wg3 masked, a second tile past 192 rows"),
] + ([   # the dense kernel's grouped mode (As through the K-major window)
    ("contiguous", [0, 1, 129, 300, 0, 77], None, 300, 1024, "bfloat16", Dense(128, 128, 5, 1, 1, 8),
     "grouped dense: TMA stores on whole tiles, direct at each group's end"),
    ("masked", [0, 64, 130, 7, 193], 200, 256, 2048, "float16", Dense(256, 128, 3, 2, 1, 8),
     "grouped dense masked, 256-row tiles in pairs sharing A"),
    ("contiguous", [0, 256, 130, 384, 0, 77, 256], None, 576, 1024, "bfloat16", Dense(128, 192, 4, 2, 0, 8),
     "grouped dense 128 x 192 pairs sharing B (DeepGEMM's contiguous tile), pairs across a group's end"),
] if dense_k_major.K_MAJOR_SWITCH else [])


@dataclass(frozen=True)
class Item:
    """One case as the command line selects and runs it."""
    label: str
    tags: tuple
    run: object                  # () -> bool (True: correct), prints its own line


def items() -> list:
    out = []
    for q in QUANTIZER_ACT:
        out.append(Item(f"quantize_per_token_group rows={q[0]} K={q[1]} {q[2]} m_major={q[3]}", ("quantizer",),
                        lambda q=q: _quant_act(*q)))
    for q in QUANTIZER_WEIGHT:
        out.append(Item(f"quantize_per_block shape={q[0]} {q[1]}", ("quantizer",), lambda q=q: _quant_weight(*q)))
    for g in GEMMS:
        out.append(Item(g.label(), g.tags, lambda g=g: _gemm(g)))
    for c in GROUPED:
        tags = ("grouped",) + (("wg3",) if c[6] is True else ())
        out.append(Item(f"{c[0]} groups={c[1]} N={c[3]} K={c[4]} {c[5]}  {c[7]}", tags, lambda c=c: _grouped(*c)))
    for m in MOE:
        out.append(Item(f"moe layer T={m[0]} E={m[1]} k={m[2]} fused={m[3]}  {m[5]}", ("moe", "grouped"),
                        lambda m=m: _moe(*m)))
    return out


# ---- the cases' runs -----------------------------------------------------------------------

def _report(ok: bool, text: str) -> bool:
    print(f"{'ok  ' if ok else 'BAD '} {text}", flush=True)
    return ok


def m_major(a_scale):
    """The same As [M, KB] as an M-major view (column stride a multiple of 4 floats, >= M)."""
    import cupy
    m, kb = a_scale.shape
    ld = max(4, -(-m // 4) * 4)
    buf = cupy.zeros((kb, ld), dtype=cupy.float32)
    buf[:, :m] = a_scale.T
    return buf[:, :m].T


def _gemm(g: Gemm) -> bool:
    import cupy

    from fp8gemm.testing import as_float64, random_case
    case = random_case(g.m, g.n, g.k, seed=g.m + g.n + g.k)
    sa = m_major(case.a_scale) if g.as_layout == "m" else case.a_scale
    out = fp8gemm.matmul(case.a, case.b, sa, case.b_scale, out_dtype=g.dt, config=g.config)
    cupy.cuda.Device().synchronize()
    err = reference.rel_fro_error(as_float64(out), case.reference(cupy))
    return _report(err <= TOL[g.dt], f"{g.label()}  err {err:.2e}")


# The activation quantizer: (rows, K, input dtype, M-major scales): its vector path (K % 128 == 0),
# element path (K tail), the big-input path (last), the M-major scale layout.
QUANTIZER_ACT = [(37, 1024, "float16", False), (5, 200, "float32", False), (64, 7168, "float32", False),
                 (9, 384, "bfloat16", False), (301, 128 * 119, "bfloat16", False), (37, 1024, "bfloat16", True),
                 (5, 200, "float16", True)]
# The weight quantizer: (shape [..., N, K], input dtype): vector path (K % 4 == 0), element path, a batch.
QUANTIZER_WEIGHT = [((300, 260), "float32"), ((130, 258), "bfloat16"), ((3, 200, 384), "float16")]


def _device_input(shape, dt, seed):
    """A random GPU array of ``dt`` (bf16 through torch: CuPy has none) and its float32 host copy."""
    import cupy
    x32 = cupy.random.default_rng(seed).standard_normal(shape, dtype=cupy.float32)
    if dt == "bfloat16":
        import torch
        x = torch.from_dlpack(x32).to(torch.bfloat16)
        return x, x.float().cpu().numpy()
    x = x32.astype(dt)
    return x, x.get().astype("float32")


def _host(a, view_u8: bool):
    """A CuPy or torch result as a NumPy array (FP8 bytes as uint8 where ``view_u8``)."""
    import cupy
    if hasattr(a, "cpu"):
        import torch
        return (a.view(torch.uint8) if view_u8 else a).cpu().numpy()
    a = cupy.asarray(a)
    return (a.view(cupy.uint8) if view_u8 else a).get()


def _quant_act(rows, k, dt, m_major_scales) -> bool:
    """Bit for bit the host reference."""
    import cupy
    import numpy as np
    x, host = _device_input((rows, k), dt, rows + k)
    q, s = fp8gemm.quantize_per_token_group(x, m_major_scales=m_major_scales)
    cupy.cuda.Device().synchronize()
    rq, rs = reference.quantize_per_token_group(host)
    ok = np.array_equal(_host(q, True), rq.view(np.uint8)) and np.array_equal(np.ascontiguousarray(_host(s, False)), rs)
    return _report(ok, f"quantize_per_token_group rows={rows} K={k} {dt} m_major={m_major_scales}")


def _quant_weight(shape, dt) -> bool:
    """Bit for bit the host reference, matrix by matrix."""
    import cupy
    import numpy as np
    w, host = _device_input(shape, dt, sum(shape))
    q, s = fp8gemm.quantize_per_block(w)
    cupy.cuda.Device().synchronize()
    qh, sh = _host(q, True).reshape((-1,) + shape[-2:]), _host(s, False)
    sh = sh.reshape((-1,) + sh.shape[-2:])
    ok = True
    for i, mat in enumerate(host.reshape((-1,) + shape[-2:])):
        rq, rs = reference.quantize_per_block(mat)
        ok &= np.array_equal(qh[i], rq.view(np.uint8)) and np.array_equal(sh[i], rs)
    return _report(bool(ok), f"quantize_per_block shape={shape} {dt}")


def _grouped(layout, sizes, max_rows, n, k, dt, config, what) -> bool:
    """One grouped call through the public calls' common path (fp8gemm.grouped.run_grouped):
    ``config`` True asks for the 192-row tiles (fp8gemm.moe's way), a descriptor forces it, None
    leaves the estimate's choice."""
    import cupy
    import numpy as np

    from fp8gemm import moe_reference
    from fp8gemm.grouped import run_grouped
    from fp8gemm.testing import as_float64, random_case
    wg3 = True if config is True else None
    forced = None if config is True else config
    g = len(sizes)
    rows = sum(sizes) if layout == "contiguous" else g * max_rows
    act = random_case(rows, 8, k, seed=rows + k)
    ws = [random_case(1, n, k, seed=n + e) for e in range(g)]
    b, sb = cupy.stack([w.b for w in ws]), cupy.stack([w.b_scale for w in ws])
    if layout == "contiguous":
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
        out = run_grouped(act.a, b, act.a_scale, sb, cupy.asarray(offsets), "offsets", False, dt, None, (128, 128),
                          None, True, wg3, forced)
        want = moe_reference.grouped_matmul_contiguous(act.a.get(), act.a_scale.get(), b.get(), sb.get(), offsets)
        got, want = as_float64(out), cupy.asarray(want)
    else:
        a = act.a.reshape(g, max_rows, k)
        sa = act.a_scale.reshape(g, max_rows, -1)
        # Rows past the counts are never written: start from zeros (initcheck reads all of out).
        out = cupy.zeros((g, max_rows, n), dtype=dt)
        run_grouped(a, b, sa, sb, cupy.asarray(sizes, dtype=cupy.int32), "counts", True, None, out, (128, 128),
                    None, True, wg3, forced)
        want = moe_reference.grouped_matmul_masked(a.get(), sa.get(), b.get(), sb.get(), sizes)
        keep = cupy.asarray(np.arange(max_rows)[None, :] < np.asarray(sizes)[:, None])
        got, want = as_float64(out)[keep], cupy.asarray(want)[keep]
    cupy.cuda.Device().synchronize()
    err = reference.rel_fro_error(got, want)
    return _report(err <= TOL[dt], f"{layout} groups={sizes} N={n} K={k} {dt:8} err {err:.2e}  {what}")


# The MoE layer: (tokens, experts, top_k, fused, FP8 input (else bf16, quantized by the layer), what).
MOE = [
    (37, 8, 3, False, True, "unfused chain, one dropped pair"),
    (37, 8, 3, True, True, "SwiGLU fused into L1 (kSwiGLU), one dropped pair"),
    (600, 8, 2, False, False, "150 rows per expert: the route kernel picks each expert's kernel; bf16 input"),
]


def _moe(tokens, experts, top_k, fused, fp8_input, what) -> bool:
    """Route, scatter, two grouped GEMMs, SwiGLU + requantize, combine against the float64 layer."""
    import cupy
    import numpy as np

    from fp8gemm import moe_reference
    from fp8gemm.testing import as_float64
    rng = np.random.default_rng(5)
    hidden, inter = 384, 256
    q1, s1 = zip(*(reference.quantize_per_block(rng.standard_normal((2 * inter, hidden)) * 0.15)
                   for _ in range(experts)))
    q2, s2 = zip(*(reference.quantize_per_block(rng.standard_normal((hidden, inter)) * 0.02)
                   for _ in range(experts)))
    q1, s1, q2, s2 = np.stack(q1), np.stack(s1), np.stack(q2), np.stack(s2)
    ids = np.stack([rng.choice(experts, top_k, replace=False) for _ in range(tokens)]).astype(np.int32)
    ids[5, 1] = -1
    w = np.full((tokens, top_k), 1.0 / top_k, dtype=np.float32)
    x = rng.standard_normal((tokens, hidden)).astype(np.float32)
    xq, xs = reference.quantize_per_token_group(x)
    dev = [cupy.asarray(a) for a in (ids, w, q1.view(np.uint8), s1, q2.view(np.uint8), s2)]
    if fp8_input:
        out = fp8gemm.moe(cupy.asarray(xq.view(np.uint8)), *dev, x_scale=cupy.asarray(xs), fused=fused)
    else:            # bf16 in (torch, as every array of the call): the layer quantizes it, bit for
        import torch  # bit as the host reference does
        xb = torch.from_dlpack(cupy.asarray(x)).to(torch.bfloat16)
        xq, xs = reference.quantize_per_token_group(xb.float().cpu().numpy())
        out = fp8gemm.moe(xb, *(torch.from_dlpack(a) for a in dev), fused=fused)
    cupy.cuda.Device().synchronize()
    keep = ids >= 0
    want = moe_reference.moe(xq, np.where(keep, ids, 0), np.where(keep, w, 0), q1, s1, q2, s2, x_scale=xs)
    err = reference.rel_fro_error(as_float64(out), cupy.asarray(want))
    return _report(err <= 1e-2, f"moe layer T={tokens} E={experts} k={top_k} fused={fused} err {err:.2e}  {what}")


# ---- command line --------------------------------------------------------------------------

# The old one-group flags, as tools/device_check.sh and earlier logs name them.
LEGACY = {"--quantizer-only": ("quantizer",), "--moe-only": ("moe",), "--gemv-only": ("gemv",),
          "--wg3-only": ("wg3",), "--grouped-only": ("grouped",), "--general-only": ("general", "swap_ab", "short_k")}


def select(argv) -> list:
    """The items the arguments select (``--only``, a legacy flag, ``--shard``), in list order."""
    chosen = items()
    wanted = set()
    for flag, tags in LEGACY.items():
        if flag in argv:
            wanted.update(tags)
    if "--only" in argv:
        wanted.update(t for t in argv[argv.index("--only") + 1].split(",") if t)
    unknown = wanted - set(TAGS)
    if unknown:
        raise SystemExit(f"unknown tags {sorted(unknown)}; known: {', '.join(TAGS)}")
    if wanted:
        chosen = [it for it in chosen if wanted & set(it.tags)]
    if "--shard" in argv:
        i, n = (int(v) for v in argv[argv.index("--shard") + 1].split("/"))
        if not 0 <= i < n:
            raise SystemExit(f"--shard I/N needs 0 <= I < N (got {i}/{n})")
        chosen = chosen[i::n]
    return chosen


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    chosen = select(argv)
    if "--list" in argv:
        for it in chosen:
            print(f"{','.join(it.tags):24} {it.label}")
        return 0
    bad = 0
    for it in chosen:
        try:
            ok = it.run()
        except Exception as exc:      # a case that raises is wrong; the others still run
            ok = _report(False, f"{it.label}  raised {type(exc).__name__}: {exc}")
        bad += not ok
    print(f"sanitize.py: {len(chosen) - bad} ok, {bad} bad", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
