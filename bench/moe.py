"""`fp8gemm-bench --moe`: the MoE layer on DeepSeek-V4 shapes, all experts on one GPU.

For each model (V4-Flash: hidden 4096, I 2048, 256 experts; V4-Pro: hidden 7168, I 3072, 384
experts; top-6), token count and routing (uniform: 6 distinct experts per token drawn uniformly;
skewed: drawn without replacement with Zipf weights 1/rank^1.5 over a random order of the experts,
so one expert takes most tokens and many get none), it times in the same run:

* ``layer_us``: `fp8gemm.moe` (FP8 input with its scales) as it runs by default (fused or not by
  dispatch/grouped.py's FUSED_ROWS);
* ``chain_us``: `fp8gemm.moe(..., fused=False)`, the unfused chain: routing, grouped L1 in FP32,
  SwiGLU + FP8 requantization kernel, grouped L2, combine;
* ``fused_us``: `fp8gemm.moe(..., fused=True)`, SwiGLU + requantization in L1's epilogue, and
  ``fused_gain`` = chain / fused (the default layer must be reproducible bit for bit and equal
  one of the two; fused and unfused agree bit for bit unless the chain's L1 splits K, and within
  the layer bound of each other where it does: ``notes`` counts the outputs that differ);
* ``invariant_us`` (with --batch-invariant): `fp8gemm.moe(..., batch_invariant=True)`, the mode in
  which a token's output row is bitwise the same whatever the other tokens (the unfused chain, both
  grouped GEMMs on the batch-invariant tile), checked like the default layer (against the float64
  layer at one token, bit for bit run to run, within the layer bound of the chain); the summary
  gives its cost: its time / the default layer's and / the chain's, per token range;
* ``gemms_us``: the two grouped GEMMs of the chain alone on the same routed row counts (L1 in FP32
  promoted per 128-K block, as the chain runs it), so ``glue_us`` = chain - GEMMs is what the glue
  and the FP32 intermediate cost;
* ``l1_us`` / ``l2_us``: each grouped GEMM alone as `fp8gemm.grouped_matmul_contiguous` runs it
  with bf16 output, and ``l1_frac`` / ``l2_frac`` = (its roofline + 2 us) / its time, the roofline
  being its active experts' weights, its input and its output over the copy bandwidth, or its FLOPs
  over the FP8 peak (the goal: >= 0.8 at decode token counts);
* ``bound_us``: the layer's roofline from ceilings measured in the same run: the bytes of the active
  experts' weights, x and the output over the copy bandwidth, or the FLOPs over the FP8 peak,
  whichever is longer. ``max_gain`` = layer / bound: what no kernel, fused or not, could beat;
* ``l1_masked_us`` / ``l2_masked_us``: the same GEMMs through `fp8gemm.grouped_matmul_masked` on
  [experts, max_m, K] rows (max_m: the largest expert's rows rounded up to 128), bf16 output; a
  decode layout, so not timed where its buffers would pass 12 GiB (``masked_fits``: skewed
  routing from 1024-2048 tokens, where one expert holds most rows);
* where `deep_gemm` is installed, DeepGEMM's grouped GEMMs on the same rows and weights, each in
  its own preferred layout (the copies into it are made outside the timing):
  ``dg_l1_us`` / ``dg_l2_us``: `m_grouped_fp8_gemm_nt_contiguous` (each expert's rows padded to
  128, `m_indices` with -1 on padding); ``dg_l1_masked_us`` / ``dg_l2_masked_us``:
  `m_grouped_fp8_gemm_nt_masked` on the masked rows, ``expected_m`` = ceil(pairs / experts).
  DeepGEMM has no layer of its own here (its contiguous layout needs other glue), so the layer
  columns have no DeepGEMM twin. Every grouped result, ours and DeepGEMM's, is checked against
  the float64 reference on three experts (the largest, a middle and the smallest non-empty one);
  a peer that raises or is wrong is reported in ``notes`` and not timed.

Timing as for the GEMM table: CUPTI device time of every kernel of a call, L2 flushed before each
call, median of --iters. The layer's output is checked against the float64 reference
(`fp8gemm.moe_reference.moe`, on the active experts only) at one token per model and routing.
"""
from __future__ import annotations

import dataclasses
import statistics

from . import report

MODELS = {"flash": (256, 4096, 2048), "pro": (384, 7168, 3072)}     # experts, hidden, intermediate
TOKENS = (1, 8, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
ROUTINGS = ("uniform", "skewed")
TOP_K = 6
SKEW = 1.5            # skewed routing: expert of rank r (random order) drawn with weight 1 / r^SKEW
CHECK_TOKENS = 1
LAYER_TOL = 1e-2      # tests/test_moe_gpu.py derives this bound for the FP8-requantized intermediate
GROUPED_TOL = 4e-3    # one grouped GEMM with bf16 output (the GEMM bench's bound)


@dataclasses.dataclass
class MoeRow:
    model: str
    routing: str
    tokens: int
    pairs: int
    active_experts: int
    max_expert_rows: int
    layer_us: float = float("nan")
    invariant_us: float | None = None      # fp8gemm.moe(batch_invariant=True), with --batch-invariant
    chain_us: float = float("nan")
    fused_us: float = float("nan")
    fused_gain: float = float("nan")
    gemms_us: float = float("nan")
    glue_us: float = float("nan")
    bound_us: float = float("nan")
    max_gain: float = float("nan")
    l1_us: float = float("nan")
    l1_frac: float = float("nan")
    l2_us: float = float("nan")
    l2_frac: float = float("nan")
    l1_masked_us: float | None = None
    l2_masked_us: float | None = None
    dg_l1_us: float | None = None
    dg_l2_us: float | None = None
    dg_l1_masked_us: float | None = None
    dg_l2_masked_us: float | None = None
    grouped_err: float | None = None
    rel_err: float | None = None
    notes: str = ""


FIELDS = [f.name for f in dataclasses.fields(MoeRow)]
_TEXT = ("model", "routing", "notes")
_INTS = ("tokens", "pairs", "active_experts", "max_expert_rows")


def write_csv(rows, path) -> None:
    import csv

    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else (f"{v:.6g}" if isinstance(v, float) else v))
                        for k, v in vars(r).items()})


def read_csv(path):
    """The rows of a ``--moe`` CSV (so that its summary can be recomputed from a committed run)."""
    import csv

    rows = []
    with open(path) as f:
        for rec in csv.DictReader(f):
            kw = {}
            for name in FIELDS:
                v = rec.get(name, "")
                kw[name] = v if name in _TEXT else int(v) if name in _INTS else (float(v) if v != "" else None)
            rows.append(MoeRow(**kw))
    return rows


def route(rng, tokens: int, experts: int, routing: str):
    """[tokens, TOP_K] int32 distinct expert ids per token (numpy)."""
    import numpy as np

    keys = rng.gumbel(size=(tokens, experts))
    if routing == "skewed":        # Gumbel top-k = sampling without replacement with these weights
        keys -= SKEW * np.log1p(rng.permutation(experts))
    return np.argsort(-keys, axis=1)[:, :TOP_K].astype(np.int32)


def fp8_bytes(shape, rng):
    """Random finite FP8 E4M3 bytes of both signs, |value| <= 112 (codes 0x00..0x6E and
    0x80..0xEE; no NaN), drawn in chunks of leading slices of at most 2^26 bytes (CuPy draws
    through int64)."""
    import math

    import cupy

    out = cupy.empty(shape, dtype=cupy.uint8)
    per = max(1, (1 << 26) // max(1, math.prod(shape[1:])))
    for i in range(0, shape[0], per):
        rows = min(per, shape[0] - i)
        v = rng.randint(0, 0xDE, size=(rows,) + tuple(shape[1:]), dtype=cupy.uint8)
        out[i:i + rows] = cupy.where(v >= 0x6F, v + 0x11, v)
    return out


def bound_us(active: int, pairs: int, tokens: int, e_h_i, bw: float, peak: float) -> float:
    _, hidden, inter = e_h_i
    weight_bytes = active * (2 * inter * hidden + hidden * inter)
    io_bytes = tokens * hidden * (1 + 2)               # FP8 x in, bf16 out
    flops = 2.0 * pairs * (2 * inter * hidden + hidden * inter)
    return max((weight_bytes + io_bytes) / bw, flops / peak) * 1e6


def gemm_roofline_us(active: int, pairs: int, n: int, k: int, bw: float, peak: float) -> float:
    """One grouped GEMM's roofline: the active groups' weights [n, k] in FP8, the pairs' FP8 rows
    [pairs, k] and bf16 output [pairs, n] over the copy bandwidth, or its FLOPs over the peak."""
    nbytes = active * n * k + pairs * k + 2 * pairs * n
    return max(nbytes / bw, 2.0 * pairs * n * k / peak) * 1e6


GEMM_SLACK_US = 2.0   # the decode target: >= 0.8 of roofline + 2 us


def check_layer(x, xs, ids, w, w1, s1, w2, s2, got) -> float:
    """Relative Frobenius error of ``got`` against the float64 layer on the active experts."""
    import cupy
    import numpy as np

    from fp8gemm import moe_reference, reference
    from fp8gemm.testing import as_float64

    active = np.unique(ids)
    local = np.searchsorted(active, ids).astype(np.int32)
    take = cupy.asarray(active)
    f8 = reference.FP8_E4M3
    want = moe_reference.moe(cupy.asnumpy(x).view(f8), local, w, cupy.asnumpy(w1[take]).view(f8),
                             cupy.asnumpy(s1[take]), cupy.asnumpy(w2[take]).view(f8),
                             cupy.asnumpy(s2[take]), x_scale=cupy.asnumpy(xs))
    return reference.rel_fro_error(cupy.asnumpy(as_float64(got)), want)


def _bf16_bits(a):
    return a.view("uint16")


def _rel_gap(a, b) -> float:
    """Relative Frobenius distance of bf16 ``a`` from bf16 ``b`` (CuPy or NumPy), in float64."""
    def value(x):
        return (_bf16_bits(x).astype("uint32") << 16).view("float32").astype("float64")
    va, vb = value(a), value(b)
    return float(((va - vb) ** 2).sum()) ** 0.5 / max(float((vb * vb).sum()) ** 0.5, 1e-300)


def compare_layers(out, again, fused, chain) -> list:
    """Notes on the default layer's output (twice), the fused and the unfused layer's (bf16, CuPy
    or NumPy): the default must repeat bit for bit and equal one of the two paths (it runs one of
    them); the fused L1 and the chain's L1 compute the same FP32 values unless the chain's L1
    splits K (its partial sums then add in another order), so the two may differ in a few last
    bits there, never by more than the layer bound."""
    bits = _bf16_bits
    notes = []
    if not bool((bits(out) == bits(again)).all()):
        notes.append("the default layer is not reproducible run to run (WRONG)")
    if not any(bool((bits(out) == bits(other)).all()) for other in (fused, chain)):
        notes.append("the default layer equals neither the fused nor the unfused layer (WRONG)")
    differ = int((bits(fused) != bits(chain)).sum())
    if differ:
        gap = _rel_gap(fused, chain)
        verdict = " (WRONG)" if not gap <= LAYER_TOL else " (FP32 sums in another order where the chain splits K)"
        notes.append(f"fused and unfused differ in {differ} of {fused.size} outputs, relative {gap:.1e}{verdict}")
    return notes


def compare_invariant(inv, again, chain) -> list:
    """Notes on the batch-invariant layer's output (twice; bf16, CuPy or NumPy): it must repeat bit
    for bit and stay within the layer bound of the default mode's unfused chain (the same chain on
    another tile, so its last bits may differ)."""
    notes = []
    if not bool((_bf16_bits(inv) == _bf16_bits(again)).all()):
        notes.append("the batch-invariant layer is not reproducible run to run (WRONG)")
    gap = _rel_gap(inv, chain)
    if not gap <= LAYER_TOL:
        notes.append(f"the batch-invariant layer is {gap:.1e} (relative) from the unfused chain (WRONG)")
    return notes


def cases(tokens, experts: int, routings, seed: int):
    """[(routing, tokens, topk ids [T, TOP_K] int32, topk weights [T, TOP_K] float32)], drawn in a
    fixed order from ``seed`` (the warm-up and the timed run see the same routing)."""
    import numpy as np

    out = []
    for routing in routings:
        hrng = np.random.default_rng(seed + (routing == "skewed"))
        for t in tokens:
            ids = route(hrng, t, experts, routing)
            wts = hrng.random((t, TOP_K)).astype(np.float32)
            out.append((routing, t, ids, wts / wts.sum(axis=1, keepdims=True)))
    return out


MASK_ALIGN = 128       # the masked layout's rows per expert: the largest count rounded up to this


def masked_rows(counts) -> int:
    return max(MASK_ALIGN, -(-int(max(counts)) // MASK_ALIGN) * MASK_ALIGN)


MASKED_BYTES = 12 << 30


def masked_fits(counts, e_h_i) -> bool:
    """Whether the masked layout is timed. It is a decode layout, [experts, max_m] rows for every
    expert alike, so under skewed routing at prefill sizes (one expert with thousands of rows) it
    holds tens of times the routed rows (80 GB for V4-Flash at 8192 skewed tokens, counting both
    GEMMs' inputs and our and DeepGEMM's outputs). Timed while those stay within MASKED_BYTES."""
    experts, hidden, inter = e_h_i
    per_row = hidden + inter + 2 * 2 * (2 * inter + hidden)
    return len(counts) * masked_rows(counts) * per_row <= MASKED_BYTES


def expected_m(pairs: int, experts: int) -> int:
    """DeepGEMM's masked hint: the mean rows per expert, as its serving callers pass it."""
    return max(1, -(-pairs // experts))


def warm_jobs(models, tokens, routings, seed: int):
    """bench/warm.py jobs for every DeepGEMM grouped call the run will make, sorted so that calls
    sharing a kernel sit together."""
    import numpy as np

    jobs = []
    for name in models:
        experts, hidden, inter = MODELS[name]
        for _, _, ids, _ in cases(tokens, experts, routings, seed):
            counts = np.bincount(ids.reshape(-1), minlength=experts).tolist()
            pairs = sum(counts)
            layouts = ("contiguous", "masked") if masked_fits(counts, MODELS[name]) else ("contiguous",)
            for n, k in ((2 * inter, hidden), (hidden, inter)):
                jobs += [_job(layout, n, k, counts, pairs, experts) for layout in layouts]
    return sorted(jobs, key=lambda j: (j["kind"], j["n"], j["k"], sum(j["counts"])))


def grouped_error(a, sa, w, s, counts, offsets, rows_of) -> float:
    """Relative Frobenius error, against the float64 reference, of a grouped result on three
    experts: the largest, a middle and the smallest non-empty one. ``rows_of(g)`` gives the
    result's rows of expert g (any framework)."""
    import cupy
    import numpy as np

    from fp8gemm import reference
    from fp8gemm.testing import as_float64

    live = [int(g) for g in np.argsort(counts, kind="stable") if counts[g] > 0]
    pick = sorted({live[-1], live[len(live) // 2], live[0]})
    got, want = [], []
    for g in pick:
        r0, r1 = int(offsets[g]), int(offsets[g + 1])
        want.append(reference.matmul(a[r0:r1], w[g], sa[r0:r1], s[g], xp=cupy))
        got.append(as_float64(rows_of(g)))
    return reference.rel_fro_error(cupy.concatenate(got), cupy.concatenate(want))


def _masked_copy(rows, counts, offsets, max_m: int, fill):
    """[experts, max_m, ...] copy of contiguous ``rows`` (CuPy), ``fill`` past each expert's count."""
    import cupy
    import numpy as np

    out = cupy.full((len(counts), max_m) + rows.shape[1:], fill, dtype=rows.dtype)
    g = np.repeat(np.arange(len(counts)), counts)
    r = np.arange(int(offsets[-1])) - np.repeat(offsets[:-1], counts)
    out[cupy.asarray(g), cupy.asarray(r)] = rows
    return out


def _grouped_peer_calls(a, sa, a_m, sa_m, w, s, counts, offsets, counts_d, pairs, check, skip=()):
    """DeepGEMM's contiguous and masked calls for one GEMM that ran and passed ``check``;
    ({label: callable}, [notes]). Layouts in ``skip`` (they crashed a warm-up worker) are not
    called at all."""
    import torch

    from .peers import _first_line, prepare_deepgemm_contiguous, prepare_deepgemm_masked

    f8 = torch.float8_e4m3fn
    ta, tsa = torch.from_dlpack(a).view(f8), torch.from_dlpack(sa)
    tw, ts = torch.from_dlpack(w).view(f8), torch.from_dlpack(s)
    calls, notes = {}, []

    def contiguous_rows(res):
        ours_order = reorder(res)
        return lambda g: ours_order[offsets[g]:offsets[g + 1]]

    if "contiguous" not in skip:
        try:
            call, reorder = prepare_deepgemm_contiguous(ta, tsa, tw, ts, counts)
            calls["contiguous"] = (call, contiguous_rows)
        except Exception as exc:
            notes.append(f"deepgemm contiguous: {type(exc).__name__} {_first_line(exc)}")
    if "masked" not in skip:
        try:
            call = prepare_deepgemm_masked(torch.from_dlpack(a_m).view(f8), torch.from_dlpack(sa_m), tw, ts,
                                           torch.from_dlpack(counts_d), expected_m(pairs, len(counts)))
            calls["masked"] = (call, lambda res: lambda g: res[g, :counts[g]])
        except Exception as exc:
            notes.append(f"deepgemm masked: {type(exc).__name__} {_first_line(exc)}")
    good = {}
    for label, (call, rows_fn) in calls.items():
        try:
            res = call()
            torch.cuda.synchronize()
        except Exception as exc:
            notes.append(f"deepgemm {label}: {type(exc).__name__} {_first_line(exc)}")
            continue
        bad = check(rows_fn(res))
        if bad:
            notes.append(f"deepgemm {label}: {bad}")
        else:
            good[label] = call
    return good, notes


def run_model(name, e_h_i, tokens, routings, flush, bw, peak, iters, seed, progress=None, deepgemm=None,
              crashed=None, batch_invariant=False):
    """The rows of one model. ``deepgemm``: None to time DeepGEMM's grouped GEMMs, else why not
    (noted in every row); ``crashed``: warm-up job keys (bench/warm.py) not to run here;
    ``batch_invariant``: also time the layer in the batch-invariant mode (``invariant_us``)."""
    import cupy
    import numpy as np

    import fp8gemm
    from fp8gemm.output import NP_DTYPES

    from .timing import time_calls
    from .warm import job_key

    crashed = crashed or {}
    experts, hidden, inter = e_h_i
    grng = cupy.random.RandomState(seed)
    w1 = fp8_bytes((experts, 2 * inter, hidden), grng)
    w2 = fp8_bytes((experts, hidden, inter), grng)
    # |out| ~ 1: x ~ 1 per element with scale 1/64 below; weight scales set so each GEMM keeps ~1.
    s1 = ((grng.random_sample((experts, 2 * inter // 128, hidden // 128), dtype=cupy.float32) + 0.5)
          * (2.0 / (64 * hidden ** 0.5)))
    s2 = ((grng.random_sample((experts, hidden // 128, inter // 128), dtype=cupy.float32) + 0.5)
          * (2.0 / (64 * inter ** 0.5)))
    bf16 = NP_DTYPES["bfloat16"]
    rows = []
    for routing, t, ids, wts in cases(tokens, experts, routings, seed):
        if progress:
            progress(f"{name} {routing} T={t}")
        counts = np.bincount(ids.reshape(-1), minlength=experts)
        pairs = int(counts.sum())
        row = MoeRow(name, routing, t, pairs, int((counts > 0).sum()), int(counts.max()))
        x = fp8_bytes((t, hidden), grng)
        xs = cupy.full((t, hidden // 128), 1.0 / 64, dtype=cupy.float32)
        ids_d, w_d = cupy.asarray(ids), cupy.asarray(wts)
        offsets_h = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        offsets = cupy.asarray(offsets_h)
        counts_d = cupy.asarray(counts.astype(np.int32))
        a1 = fp8_bytes((pairs, hidden), grng)
        sa1 = cupy.full((pairs, hidden // 128), 1.0 / 64, dtype=cupy.float32)
        a2 = fp8_bytes((pairs, inter), grng)
        sa2 = cupy.full((pairs, inter // 128), 1.0 / 64, dtype=cupy.float32)
        masked = masked_fits(counts, e_h_i)
        a1_m = sa1_m = a2_m = sa2_m = y1_m = y2_m = None
        if masked:
            max_m = masked_rows(counts)
            a1_m, sa1_m = _masked_copy(a1, counts, offsets_h, max_m, 0), _masked_copy(sa1, counts, offsets_h, max_m, 1)
            a2_m, sa2_m = _masked_copy(a2, counts, offsets_h, max_m, 0), _masked_copy(sa2, counts, offsets_h, max_m, 1)
            y1_m = cupy.ndarray((experts, max_m, 2 * inter), bf16)
            y2_m = cupy.ndarray((experts, max_m, hidden), bf16)
        h = cupy.empty((pairs, 2 * inter), dtype=cupy.float32)
        y1, y2 = cupy.ndarray((pairs, 2 * inter), bf16), cupy.ndarray((pairs, hidden), bf16)

        def layer():
            return fp8gemm.moe(x, ids_d, w_d, w1, s1, w2, s2, x_scale=xs, batch_invariant=False)

        def fused():
            return fp8gemm.moe(x, ids_d, w_d, w1, s1, w2, s2, x_scale=xs, fused=True, batch_invariant=False)

        def chain():
            return fp8gemm.moe(x, ids_d, w_d, w1, s1, w2, s2, x_scale=xs, fused=False, batch_invariant=False)

        def invariant():
            return fp8gemm.moe(x, ids_d, w_d, w1, s1, w2, s2, x_scale=xs, batch_invariant=True)

        def gemms():
            fp8gemm.grouped_matmul_contiguous(a1, w1, sa1, s1, offsets, out=h, precise_fp32=False,
                                              batch_invariant=False)
            return fp8gemm.grouped_matmul_contiguous(a2, w2, sa2, s2, offsets, out_dtype="bfloat16",
                                                     batch_invariant=False)

        # the default mode explicitly (the process-wide switch would put these in the other mode)
        gemm = {"l1": lambda: fp8gemm.grouped_matmul_contiguous(a1, w1, sa1, s1, offsets, out=y1, batch_invariant=False),
                "l2": lambda: fp8gemm.grouped_matmul_contiguous(a2, w2, sa2, s2, offsets, out=y2, batch_invariant=False)}
        if masked:
            gemm["l1_masked"] = lambda: fp8gemm.grouped_matmul_masked(a1_m, w1, sa1_m, s1, counts_d, out=y1_m,
                                                                       expected_rows=pairs, batch_invariant=False)
            gemm["l2_masked"] = lambda: fp8gemm.grouped_matmul_masked(a2_m, w2, sa2_m, s2, counts_d, out=y2_m,
                                                                       expected_rows=pairs, batch_invariant=False)
        notes_masked = [] if masked else \
            [f"masked layout not timed: {experts} x {masked_rows(counts)} rows for {pairs} pairs"]
        out, chain_out = layer(), chain()
        layer_notes = compare_layers(out, layer(), fused(), chain_out)
        inv_out = None
        if batch_invariant:
            inv_out = invariant()
            layer_notes += compare_invariant(inv_out, invariant(), chain_out)
        gemms()
        for fn in gemm.values():
            fn()
        cupy.cuda.Device().synchronize()
        notes = notes_masked + layer_notes
        if t <= CHECK_TOKENS:
            row.rel_err = check_layer(x, xs, ids, wts, w1, s1, w2, s2, out)
            if not row.rel_err <= LAYER_TOL:
                notes.append(f"layer WRONG ({row.rel_err:.1e})")
            if inv_out is not None:
                inv_err = check_layer(x, xs, ids, wts, w1, s1, w2, s2, inv_out)
                if not inv_err <= LAYER_TOL:
                    notes.append(f"batch-invariant layer WRONG ({inv_err:.1e})")
        layers = {"l1": (a1, sa1, w1, s1, y1, y1_m), "l2": (a2, sa2, w2, s2, y2, y2_m)}
        errs = []
        for lname, (a, sa, w, s, y, y_m) in layers.items():
            errs.append(grouped_error(a, sa, w, s, counts, offsets_h,
                                      lambda g, y=y: y[offsets_h[g]:offsets_h[g + 1]]))
            if masked:
                errs.append(grouped_error(a, sa, w, s, counts, offsets_h, lambda g, y_m=y_m: y_m[g, :counts[g]]))
        row.grouped_err = max(errs)
        if not row.grouped_err <= GROUPED_TOL:
            notes.append(f"grouped GEMM WRONG ({row.grouped_err:.1e})")
        fns = {"layer": layer, "chain": chain, "fused": fused, "gemms": gemms, **gemm}
        if batch_invariant:
            fns["invariant"] = invariant
        if deepgemm is None:
            for lname, (a, sa, w, s, _, _), (a_m, sa_m) in zip(layers, layers.values(),
                                                              ((a1_m, sa1_m), (a2_m, sa2_m))):
                n, k = w.shape[1], w.shape[2]
                skip = {} if masked else {"masked": "masked layout not timed at this routing (masked_fits)"}
                for lb in ("contiguous", "masked")[:2 if masked else 1]:
                    why = crashed.get(job_key(_job(lb, n, k, counts, pairs, experts)))
                    if why:
                        skip[lb] = why
                        notes.append(f"deepgemm {lname} {lb}: not timed, {why}")

                def check(res, a=a, sa=sa, w=w, s=s):
                    err = grouped_error(a, sa, w, s, counts, offsets_h, res)
                    return None if err <= GROUPED_TOL else f"wrong ({err:.1e})"

                good, dg_notes = _grouped_peer_calls(a, sa, a_m, sa_m, w, s, counts, offsets_h, counts_d, pairs,
                                                     check, skip)
                notes += dg_notes
                for lb, call in good.items():
                    fns[f"dg_{lname}" + ("_masked" if lb == "masked" else "")] = call
        else:
            notes.append(deepgemm)
        try:
            us = time_calls(fns, flush, iters)
        except Exception as exc:
            notes.append(f"timing with DeepGEMM failed ({type(exc).__name__}): ours timed alone")
            fns = {k: v for k, v in fns.items() if not k.startswith("dg_")}
            us = time_calls(fns, flush, iters)
        row.layer_us, row.chain_us, row.fused_us, row.gemms_us = us["layer"], us["chain"], us["fused"], us["gemms"]
        row.invariant_us = us.get("invariant")
        row.l1_us, row.l2_us = us["l1"], us["l2"]
        row.l1_masked_us, row.l2_masked_us = us.get("l1_masked"), us.get("l2_masked")
        for key in ("dg_l1", "dg_l2", "dg_l1_masked", "dg_l2_masked"):
            setattr(row, f"{key}_us", us.get(key))
        row.l1_frac = (gemm_roofline_us(row.active_experts, pairs, 2 * inter, hidden, bw, peak)
                       + GEMM_SLACK_US) / row.l1_us
        row.l2_frac = (gemm_roofline_us(row.active_experts, pairs, hidden, inter, bw, peak)
                       + GEMM_SLACK_US) / row.l2_us
        row.fused_gain = row.chain_us / row.fused_us
        row.glue_us = row.chain_us - row.gemms_us
        row.bound_us = bound_us(row.active_experts, pairs, t, e_h_i, bw, peak)
        row.max_gain = row.layer_us / row.bound_us
        row.notes = "; ".join(notes)
        rows.append(row)
        fns = gemm = layers = a1_m = sa1_m = a2_m = sa2_m = y1_m = y2_m = None     # noqa: F841 (closures)
        _free_pools()
    return rows


def _free_pools():
    """Hand the row's buffers back (CuPy's pool and torch's cache) so that rows of other sizes
    do not pile up on the GPU."""
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()
    try:
        import torch

        torch.cuda.empty_cache()
    except ImportError:
        pass


def _job(layout: str, n: int, k: int, counts, pairs: int, experts: int) -> dict:
    """The warm-up job (warm_jobs) of one DeepGEMM grouped call."""
    counts = [int(c) for c in counts]
    if layout == "contiguous":
        return {"kind": "deepgemm_contiguous", "n": n, "k": k, "counts": counts}
    return {"kind": "deepgemm_masked", "n": n, "k": k, "counts": counts, "max_m": masked_rows(counts),
            "expected_m": expected_m(pairs, experts)}


DG_PAIRS = (("l1", "dg_l1"), ("l2", "dg_l2"), ("l1_masked", "dg_l1_masked"), ("l2_masked", "dg_l2_masked"))


def dg_speedup(row: MoeRow, ours: str, theirs: str):
    """DeepGEMM's time / ours for one of DG_PAIRS (> 1: we are faster); None when not measured."""
    a, b = getattr(row, f"{ours}_us"), getattr(row, f"{theirs}_us")
    return b / a if (a and b and a == a and b == b) else None


def format_table(rows) -> str:
    """One line per row; the batch-invariant layer's column where a row has it."""
    inv = any(r.invariant_us is not None for r in rows)
    head = (f"{'model':6} {'routing':8} {'T':>5} {'pairs':>6} {'experts':>7} {'layer_us':>9} "
            + (f"{'invariant':>9} " if inv else "") + f"{'chain_us':>9} "
            f"{'fused_us':>9} "
            f"{'fused_x':>7} {'gemms_us':>9} {'glue_us':>8} {'bound_us':>9} {'max_gain':>8} {'l1_frac':>7} "
            f"{'l2_frac':>7} {'dg/l1':>6} {'dg/l2':>6} {'dg/l1m':>6} {'dg/l2m':>6} {'rel_err':>8}")
    lines = [head]
    for r in rows:
        err = f"{r.rel_err:8.1e}" if r.rel_err is not None else " " * 8
        dg = " ".join(f"{v:6.2f}" if v is not None else " " * 6
                      for v in (dg_speedup(r, o, t) for o, t in DG_PAIRS))
        lines.append(f"{r.model:6} {r.routing:8} {r.tokens:5d} {r.pairs:6d} {r.active_experts:7d} "
                     f"{r.layer_us:9.1f} " + (f"{_num(r.invariant_us):>9} " if inv else "")
                     + f"{_chain_us(r):9.1f} {r.fused_us:9.1f} {r.fused_gain:7.2f} "
                     f"{r.gemms_us:9.1f} {r.glue_us:8.1f} {r.bound_us:9.1f} "
                     f"{r.max_gain:8.2f} {r.l1_frac:7.2f} {r.l2_frac:7.2f} {dg} {err}")
    return "\n".join(lines)


def _num(v) -> str:
    return "" if v is None else f"{v:.1f}"


def _chain_us(r) -> float:
    """The unfused chain's time (a CSV from before chain_us: the layer's, which was the chain)."""
    return r.chain_us if isinstance(r.chain_us, float) and r.chain_us == r.chain_us else r.layer_us


def summarize(rows) -> dict:
    def gm(vals):
        vals = [v for v in vals if v is not None and v == v and v > 0]
        return statistics.geometric_mean(vals) if vals else None

    out = {}
    for label, sel in (("tokens<=128", lambda r: r.tokens <= 128), ("tokens>=1024", lambda r: r.tokens >= 1024),
                       ("all", lambda r: True)):
        part = [r for r in rows if sel(r)]
        out[label] = {"shapes": len(part),
                      "glue_fraction_geomean": gm([r.glue_us / _chain_us(r) for r in part]),
                      "fused_gain_geomean": gm([r.fused_gain for r in part]),
                      "max_gain_geomean": gm([r.max_gain for r in part]),
                      "bound_fraction_geomean": gm([r.bound_us / r.layer_us for r in part]),
                      "gemm_fracs": [f for r in part for f in (r.l1_frac, r.l2_frac) if f == f],
                      "vs_deepgemm": {f"{o}": gm([dg_speedup(r, o, t) for r in part]) for o, t in DG_PAIRS},
                      "deepgemm_pairs": sum(dg_speedup(r, o, t) is not None for r in part for o, t in DG_PAIRS),
                      "slower_than_deepgemm": [f"{_row_name(r)} {o}" for r in part for o, t in DG_PAIRS
                                               if (dg_speedup(r, o, t) or 2.0) < 1.0]}
    out["wrong"] = [_row_name(r) for r in rows if "WRONG" in r.notes]
    invariant = summarize_invariant(rows)
    if invariant:
        out["batch_invariant"] = invariant
    return out


def _row_name(r) -> str:
    return f"{r.model} {r.routing} T={r.tokens}"


TOKEN_RANGES = (("tokens<=64", lambda r: r.tokens <= 64), ("tokens>=1024", lambda r: r.tokens >= 1024))


def summarize_invariant(rows) -> dict:
    """The batch-invariant layer's cost (``--batch-invariant``), as the GEMM trace's
    (report.summarize_invariant): its time over the default layer's and over the unfused chain's
    (the mode runs the chain; this ratio is the batch-invariant tile's cost), same run, same timer,
    overall and per TOKEN_RANGES; > 1: the mode is slower."""
    out = {}
    for against, col in (("default", "layer_us"), ("chain", "chain_us")):
        ratios = report.time_ratios(rows, "invariant_us", col, TOKEN_RANGES, _row_name, "per_token_range")
        if ratios:
            out[f"vs_{against}"] = ratios
    return out


def _pct(v) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def format_summary(summary: dict) -> str:
    lines = ["MoE layer summary (bound = roofline of the active experts' weights and the FLOPs; "
             "max_gain = layer / bound)"]
    for label in ("tokens<=128", "tokens>=1024", "all"):
        s = summary[label]
        if not s["shapes"]:
            continue
        lines.append(f"  {label:13} {s['shapes']:3d} rows: layer at {s['bound_fraction_geomean']:.2f} of its bound "
                     f"(geomean), glue {_pct(s['glue_fraction_geomean'])} of the chain, the fused L1 "
                     f"{s['fused_gain_geomean']:.2f}x the chain's speed; most any kernel could gain "
                     f"{s['max_gain_geomean']:.2f}x")
    dec = summary["tokens<=128"]["gemm_fracs"]
    if dec:
        lines.append(f"  grouped GEMMs alone at <= 128 tokens: {sum(f >= 0.8 for f in dec)} of {len(dec)} at >= 0.8 "
                     f"of roofline + {GEMM_SLACK_US:g} us (lowest {min(dec):.2f})")
    for label in ("tokens<=128", "tokens>=1024", "all"):
        s = summary[label]
        vs = {k: v for k, v in s["vs_deepgemm"].items() if v is not None}
        if s["shapes"] and vs:
            lines.append(f"  vs DeepGEMM, {label:13} (its time / ours, geomean): "
                         + ", ".join(f"{k} {v:.2f}x" for k, v in vs.items())
                         + f"; slower on {len(s['slower_than_deepgemm'])} of {s['deepgemm_pairs']} GEMMs")
    lines += report.format_invariant(summary.get("batch_invariant"), "layer", "rows", "per_token_range")
    lines.append(f"  wrong outputs: {', '.join(summary['wrong']) or 'none'}")
    return "\n".join(lines)


if __name__ == "__main__":        # python -m fp8gemm.bench.moe RESULTS.csv: its summary again
    import sys

    print(format_summary(summarize(read_csv(sys.argv[1]))))
