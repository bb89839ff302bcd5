"""Correctness run for compute-sanitizer (memcheck, racecheck, synccheck, initcheck): every kernel
path once on small shapes with M, N and K tails, each checked against the float64 reference.

    compute-sanitizer --tool memcheck --error-exitcode 9 python3 tools/sanitize.py [--quantizer-only | --moe-only | --gemv-only | --wg3-only |
                                                                                  --grouped-only | --general-only]

Exit status 1 if an output is wrong; the sanitizer's own exit code reports what it found."""
import sys

import cupy

import fp8gemm
from fp8gemm import reference
from fp8gemm.dispatch import General, Gemv, ShortK, SwapAB, Wg3
from fp8gemm.testing import as_float64, random_case

TOL = {"bfloat16": 4e-3, "float16": 1e-3, "float32": 1e-4}
CASES = [   # (M, N, K, out dtype, candidate or None for the dispatcher, what it covers)
    (200, 300, 1040, "bfloat16", General(128, 4, 8), "two accumulators, TMA store, M/N/K tails"),
    (200, 300, 1040, "float32", General(128, 4, 8), "fine promotion (fp32), TMA store"),
    (130, 200, 2064, "float16", General(32, 4, 8, splits=4), "split-K, direct store"),
    (100, 256, 272, "bfloat16", General(64, 4, 8, splits=4), "empty K splits"),
    (5, 300, 1040, "bfloat16", SwapAB(8, 4, 8, splits=3), "swap-AB split-K"),
    (37, 200, 528, "float32", SwapAB(16, 4, 8), "swap-AB, fine promotion"),
    (3, 1000, 2064, "float16", General(16, 3, 1, splits=16), "split-K, 16 splits, N tail"),
    (1, 512, 4096, "bfloat16", SwapAB(8, 6, 1, splits=8),
     "swap-AB split-K at M = 1: threads with no token skip the workspace"),
    (70, 300, 1552, "bfloat16", General(128, 4, 8, splits=5), "split-K, 128-wide tile: one split per load chunk"),
    (300, 520, 1040, "bfloat16", General(16, 4, 8), "last row tile's A box moved up (capped at 64 rows)"),
    (5, 300, 1040, "float32", SwapAB(8, 6, 1, splits=2), "swap-AB, weight box moved up"),
    (64, 4096, 4096, "bfloat16", None, "dispatcher's pick"),
    (60, 300, 1040, "bfloat16", General(128, 4, 8), "a warpgroup wholly past M passes the issue-order barrier"),
    (130, 520, 2064, "float16", General(128, 6, 8), "issue-order barrier: last row tile's second warpgroup idle"),
    (200, 300, 240, "bfloat16", ShortK(128, 128),
     "short-K, two K blocks (second partial), TMA store, M/N tails"),
    (70, 100, 112, "float32", ShortK(64, 32),
     "short-K, one K block, fine promotion, direct store"),
]
GEMV_CASES = [
    (3, 17, 4112, "bfloat16", Gemv(8, 4, 4),
     "gemv: N tail inside one CTA, K tail past 4 x 4 blocks in flight"),
    (16, 300, 1040, "float32", Gemv(16, 8, 1),
     "gemv: two token tiles, fp32, partial last CTA"),
]
WG3_CASES = [
    (200, 300, 1040, "bfloat16", Wg3(128, 3, 8),
     "wg3: a warpgroup wholly past M, TMA store, N/K tails"),
    (400, 100, 272, "float16", Wg3(64, 4, 1),
     "wg3: two row tiles, direct store (N tail), one partial K block"),
]
CASES += GEMV_CASES + WG3_CASES


def quantizer_cases() -> int:
    """The activation quantizer's vector path (K % 128 == 0) and element path (K tail), every input
    dtype, against the host reference bit for bit."""
    import numpy as np
    bad = 0
    for rows, k, dt in [(37, 1024, cupy.float16), (5, 200, cupy.float32), (64, 7168, cupy.float32),
                        (9, 384, "bfloat16"), (301, 128 * 119, "bfloat16")]:   # last: the big-input path
        x32 = cupy.random.default_rng(rows + k).standard_normal((rows, k), dtype=cupy.float32)
        if dt == "bfloat16":      # CuPy has no bf16: go through torch
            import torch
            x = torch.from_dlpack(x32).to(torch.bfloat16)
            host = x.float().cpu().numpy()
        else:
            x = x32.astype(dt)
            host = x.get()
        q, s = fp8gemm.quantize_per_token_group(x)
        cupy.cuda.Device().synchronize()
        rq, rs = reference.quantize_per_token_group(host.astype(np.float32))
        qb = cupy.asarray(q).view(cupy.uint8).get() if not hasattr(q, "cpu") else q.view(torch.uint8).cpu().numpy()
        sg = cupy.asarray(s).get() if not hasattr(s, "cpu") else s.cpu().numpy()
        ok = np.array_equal(qb, rq.view(np.uint8)) and np.array_equal(sg, rs)
        bad += not ok
        print(f"{'ok  ' if ok else 'BAD '} quantize rows={rows} K={k} {np.dtype(dt).name if dt != 'bfloat16' else dt}",
              flush=True)
    return bad


GROUPED = [   # (layout, group sizes, max_rows (masked), N, K, out dtype, what it covers)
    ("contiguous", [10, 0, 130, 70], None, 300, 400, "bfloat16", "grouped, 128-row tiles, TMA + boundary stores"),
    ("contiguous", [1, 2, 0, 5, 9, 17, 3, 0, 33], None, 300, 2064, "float32", "grouped swap-AB, K splits"),
    ("masked", [1, 0, 3, 8, 0, 2], 8, 300, 2064, "float32", "grouped masked swap-AB, K splits"),
    ("masked", [0, 64, 130, 7], 200, 256, 512, "float32", "grouped masked, 128-row tiles"),
]
# The three-warpgroup kernel's grouped mode (asked for, as fp8gemm.moe does): 192-row tiles.
GROUPED_WG3 = [
    ("contiguous", [0, 1, 129, 192, 200, 7], None, 300, 400, "bfloat16", "grouped wg3, a group's end in every 64-row slab"),
    ("masked", [0, 64, 130, 7, 193], 200, 256, 512, "float16", "grouped wg3 masked, a second tile past 192 rows"),
]


def grouped_cases(cases=GROUPED, wg3: bool = False) -> int:
    """The grouped GEMM in both layouts and both orientations, against moe_reference; ``wg3``:
    on the three-warpgroup kernel's grouped mode (fp8gemm.moe's way of asking for it)."""
    import numpy as np

    from fp8gemm import moe_reference
    return sum(_grouped_case(*case, np=np, moe_reference=moe_reference, wg3=wg3) for case in cases)


def _grouped_case(layout, sizes, max_rows, n, k, dt, what, np, moe_reference, wg3: bool) -> int:
    """One grouped case through the public calls' common path (fp8gemm.grouped.run_grouped), with
    ``wg3`` the 192-row tiles asked for, else the dispatcher's tile."""
    from fp8gemm.grouped import run_grouped
    tile = True if wg3 else None
    g = len(sizes)
    rows = sum(sizes) if layout == "contiguous" else g * max_rows
    act = random_case(rows, 8, k, seed=rows + k)
    ws = [random_case(1, n, k, seed=n + e) for e in range(g)]
    b, sb = cupy.stack([w.b for w in ws]), cupy.stack([w.b_scale for w in ws])
    if layout == "contiguous":
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
        out = run_grouped(act.a, b, act.a_scale, sb, cupy.asarray(offsets), "offsets", False, dt, None, (128, 128),
                          None, True, tile)
        want = moe_reference.grouped_matmul_contiguous(act.a.get(), act.a_scale.get(), b.get(), sb.get(), offsets)
        got = as_float64(out)
    else:
        a = act.a.reshape(g, max_rows, k)
        sa = act.a_scale.reshape(g, max_rows, -1)
        # Rows past the counts are never written: start from zeros (initcheck reads all of out).
        out = cupy.zeros((g, max_rows, n), dtype=dt)
        run_grouped(a, b, sa, sb, cupy.asarray(sizes, dtype=cupy.int32), "counts", True, None, out, (128, 128),
                    None, True, tile)
        want = moe_reference.grouped_matmul_masked(a.get(), sa.get(), b.get(), sb.get(), sizes)
        got = as_float64(out)
        keep = cupy.asarray(np.arange(max_rows)[None, :] < np.asarray(sizes)[:, None])
        got, want = got[keep], cupy.asarray(want)[keep]
    cupy.cuda.Device().synchronize()
    err = reference.rel_fro_error(got, cupy.asarray(want))
    ok = err <= TOL[dt]
    print(f"{'ok  ' if ok else 'BAD '} {layout} groups={sizes} N={n} K={k} {dt:8} err {err:.2e}  {what}", flush=True)
    return int(not ok)


def moe_case() -> int:
    """The MoE layer (route, scatter, two grouped GEMMs, SwiGLU + requantize, combine) with one
    dropped pair, unfused and with the SwiGLU fused into L1, against the float64 reference."""
    import numpy as np

    from fp8gemm import moe_reference
    rng = np.random.default_rng(5)
    experts, hidden, inter, tokens, top_k = 8, 384, 256, 37, 3
    q1, s1 = zip(*(reference.quantize_per_block(rng.standard_normal((2 * inter, hidden)) * 0.15)
                   for _ in range(experts)))
    q2, s2 = zip(*(reference.quantize_per_block(rng.standard_normal((hidden, inter)) * 0.02)
                   for _ in range(experts)))
    q1, s1, q2, s2 = np.stack(q1), np.stack(s1), np.stack(q2), np.stack(s2)
    ids = np.stack([rng.choice(experts, top_k, replace=False) for _ in range(tokens)]).astype(np.int32)
    ids[5, 1] = -1
    w = np.full((tokens, top_k), 1.0 / top_k, dtype=np.float32)
    xq, xs = reference.quantize_per_token_group(rng.standard_normal((tokens, hidden)).astype(np.float32))
    dev = [cupy.asarray(a) for a in (xq.view(np.uint8), ids, w, q1.view(np.uint8), s1, q2.view(np.uint8), s2, xs)]
    keep = ids >= 0
    want = moe_reference.moe(xq, np.where(keep, ids, 0), np.where(keep, w, 0), q1, s1, q2, s2, x_scale=xs)
    bad = 0
    for fused in (False, True):
        out = fp8gemm.moe(*dev[:7], x_scale=dev[7], fused=fused)
        cupy.cuda.Device().synchronize()
        err = reference.rel_fro_error(as_float64(out), cupy.asarray(want))
        ok = err <= 1e-2
        bad += not ok
        print(f"{'ok  ' if ok else 'BAD '} moe layer T={tokens} E={experts} k={top_k} fused={fused} err {err:.2e}",
              flush=True)
    return bad


def main() -> int:
    if "--moe-only" in sys.argv:
        return moe_case()
    if "--grouped-only" in sys.argv:
        return 1 if grouped_cases() + moe_case() else 0
    if "--gemv-only" in sys.argv:
        return 1 if run_cases(GEMV_CASES) else 0
    if "--general-only" in sys.argv:
        return 1 if run_cases([c for c in CASES if c not in GEMV_CASES + WG3_CASES]) else 0
    if "--wg3-only" in sys.argv:
        return 1 if run_cases(WG3_CASES) + grouped_cases(GROUPED_WG3, wg3=True) else 0
    bad = quantizer_cases()
    if "--quantizer-only" in sys.argv:
        return 1 if bad else 0
    bad += moe_case()
    bad += grouped_cases()
    bad += grouped_cases(GROUPED_WG3, wg3=True)
    bad += run_cases(CASES)
    return 1 if bad else 0


def run_cases(cases) -> int:
    bad = 0
    for m, n, k, dt, cand, what in cases:
        case = random_case(m, n, k, seed=m + n + k)
        out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, out_dtype=dt, config=cand)
        cupy.cuda.Device().synchronize()
        err = reference.rel_fro_error(as_float64(out), case.reference(cupy))
        ok = err <= TOL[dt]
        bad += not ok
        print(f"{'ok  ' if ok else 'BAD '} M={m} N={n} K={k} {dt:8} err {err:.2e}  {what}", flush=True)
    return bad


if __name__ == "__main__":
    sys.exit(main())
