"""`fp8gemm-bench --moe`: the MoE layer (issue 8) on DeepSeek-V4 shapes, all experts on one GPU.

For each model (V4-Flash: hidden 4096, I 2048, 256 experts; V4-Pro: hidden 7168, I 3072, 384
experts; top-6), token count and routing (uniform: 6 distinct experts per token drawn uniformly;
skewed: drawn without replacement with Zipf weights 1/rank^1.5 over a random order of the experts,
so one expert takes most tokens and many get none), it times in the same run:

* ``layer_us``: `fp8gemm.moe` (FP8 input with its scales) as it runs by default, the unfused chain:
  routing, grouped L1 in FP32, SwiGLU + FP8 requantization kernel, grouped L2, combine;
* ``fused_us``: `fp8gemm.moe(..., fused=True)`, SwiGLU + requantization in L1's epilogue, and
  ``fused_gain`` = layer / fused (the two outputs are compared bit for bit);
* ``gemms_us``: the two grouped GEMMs of the chain alone on the same routed row counts (L1 in FP32
  promoted per 128-K block, as the chain runs it), so ``glue_us`` = layer - GEMMs is what the glue
  and the FP32 intermediate cost;
* ``l1_us`` / ``l2_us``: each grouped GEMM alone as `fp8gemm.grouped_matmul_contiguous` runs it
  with bf16 output, and ``l1_frac`` / ``l2_frac`` = (its roofline + 2 us) / its time, the roofline
  being its active experts' weights, its input and its output over the copy bandwidth, or its FLOPs
  over the FP8 peak (issue 8: >= 0.8 at decode token counts);
* ``bound_us``: the layer's roofline from ceilings measured in the same run: the bytes of the active
  experts' weights, x and the output over the copy bandwidth, or the FLOPs over the FP8 peak,
  whichever is longer. ``max_gain`` = layer / bound: what no kernel, fused or not, could beat;
* DeepGEMM's grouped GEMMs with the same glue where `deep_gemm` is installed (``notes`` says when
  it is not).

Timing as for the GEMM table: CUPTI device time of every kernel of a call, L2 flushed before each
call, median of --iters. The layer's output is checked against the float64 reference
(`fp8gemm.moe_reference.moe`, on the active experts only) at one token per model and routing.
"""
from __future__ import annotations

import dataclasses
import statistics

MODELS = {"flash": (256, 4096, 2048), "pro": (384, 7168, 3072)}     # experts, hidden, intermediate
TOKENS = (1, 8, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
ROUTINGS = ("uniform", "skewed")
TOP_K = 6
SKEW = 1.5            # skewed routing: expert of rank r (random order) drawn with weight 1 / r^SKEW
CHECK_TOKENS = 1
LAYER_TOL = 1e-2      # tests/test_moe_gpu.py derives this bound for the FP8-requantized intermediate


@dataclasses.dataclass
class MoeRow:
    model: str
    routing: str
    tokens: int
    pairs: int
    active_experts: int
    max_expert_rows: int
    layer_us: float = float("nan")
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
    deepgemm_us: float | None = None
    rel_err: float | None = None
    notes: str = ""


FIELDS = [f.name for f in dataclasses.fields(MoeRow)]


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


GEMM_SLACK_US = 2.0   # issue 8's decode target: >= 0.8 of roofline + 2 us


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


def deepgemm_available() -> str | None:
    import importlib.util

    if importlib.util.find_spec("deep_gemm") is None:
        return "deep_gemm not installed"
    return "deep_gemm is installed, but its grouped baseline is not implemented here: not timed"


def run_model(name, e_h_i, tokens, routings, flush, bw, peak, iters, seed, progress=None):
    import cupy
    import numpy as np

    import fp8gemm

    from .timing import time_calls

    experts, hidden, inter = e_h_i
    grng = cupy.random.RandomState(seed)
    w1 = fp8_bytes((experts, 2 * inter, hidden), grng)
    w2 = fp8_bytes((experts, hidden, inter), grng)
    # |out| ~ 1: x ~ 1 per element with scale 1/64 below; weight scales set so each GEMM keeps ~1.
    s1 = ((grng.random_sample((experts, 2 * inter // 128, hidden // 128), dtype=cupy.float32) + 0.5)
          * (2.0 / (64 * hidden ** 0.5)))
    s2 = ((grng.random_sample((experts, hidden // 128, inter // 128), dtype=cupy.float32) + 0.5)
          * (2.0 / (64 * inter ** 0.5)))
    deep_note = deepgemm_available()
    rows = []
    for routing in routings:
        hrng = np.random.default_rng(seed + (routing == "skewed"))
        for t in tokens:
            if progress:
                progress(f"{name} {routing} T={t}")
            ids = route(hrng, t, experts, routing)
            counts = np.bincount(ids.reshape(-1), minlength=experts)
            pairs = int(counts.sum())
            row = MoeRow(name, routing, t, pairs, int((counts > 0).sum()), int(counts.max()))
            x = fp8_bytes((t, hidden), grng)
            xs = cupy.full((t, hidden // 128), 1.0 / 64, dtype=cupy.float32)
            ids_d = cupy.asarray(ids)
            wts = hrng.random((t, TOP_K)).astype(np.float32)
            wts /= wts.sum(axis=1, keepdims=True)
            w_d = cupy.asarray(wts)
            offsets = cupy.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
            a1 = fp8_bytes((pairs, hidden), grng)
            sa1 = cupy.full((pairs, hidden // 128), 1.0 / 64, dtype=cupy.float32)
            a2 = fp8_bytes((pairs, inter), grng)
            sa2 = cupy.full((pairs, inter // 128), 1.0 / 64, dtype=cupy.float32)
            h = cupy.empty((pairs, 2 * inter), dtype=cupy.float32)
            h16 = cupy.empty((pairs, 2 * inter), dtype=cupy.float16)    # bf16's bytes (CuPy has no bf16)
            y16 = cupy.empty((pairs, hidden), dtype=cupy.float16)

            def layer():
                return fp8gemm.moe(x, ids_d, w_d, w1, s1, w2, s2, x_scale=xs)

            def fused():
                return fp8gemm.moe(x, ids_d, w_d, w1, s1, w2, s2, x_scale=xs, fused=True)

            def gemms():
                fp8gemm.grouped_matmul_contiguous(a1, w1, sa1, s1, offsets, out=h, precise_fp32=False)
                return fp8gemm.grouped_matmul_contiguous(a2, w2, sa2, s2, offsets, out_dtype="bfloat16")

            def gemm_l1():
                return fp8gemm.grouped_matmul_contiguous(a1, w1, sa1, s1, offsets, out=h16)

            def gemm_l2():
                return fp8gemm.grouped_matmul_contiguous(a2, w2, sa2, s2, offsets, out=y16)

            out = layer()
            same = bool((out.view(cupy.uint16) == fused().view(cupy.uint16)).all())
            gemms(), gemm_l1(), gemm_l2()
            cupy.cuda.Device().synchronize()
            notes = [] if same else ["fused and unfused layers DIFFER (WRONG)"]
            if t <= CHECK_TOKENS:
                row.rel_err = check_layer(x, xs, ids, wts, w1, s1, w2, s2, out)
                if not row.rel_err <= LAYER_TOL:
                    notes.append(f"layer WRONG ({row.rel_err:.1e})")
            us = time_calls({"layer": layer, "fused": fused, "gemms": gemms, "l1": gemm_l1, "l2": gemm_l2},
                            flush, iters)
            row.layer_us, row.fused_us, row.gemms_us = us["layer"], us["fused"], us["gemms"]
            row.l1_us, row.l2_us = us["l1"], us["l2"]
            row.l1_frac = (gemm_roofline_us(row.active_experts, pairs, 2 * inter, hidden, bw, peak)
                           + GEMM_SLACK_US) / row.l1_us
            row.l2_frac = (gemm_roofline_us(row.active_experts, pairs, hidden, inter, bw, peak)
                           + GEMM_SLACK_US) / row.l2_us
            row.fused_gain = row.layer_us / row.fused_us
            row.glue_us = row.layer_us - row.gemms_us
            row.bound_us = bound_us(row.active_experts, pairs, t, e_h_i, bw, peak)
            row.max_gain = row.layer_us / row.bound_us
            if deep_note:
                notes.append(deep_note)
            row.notes = "; ".join(notes)
            rows.append(row)
    return rows


def format_table(rows) -> str:
    head = (f"{'model':6} {'routing':8} {'T':>5} {'pairs':>6} {'experts':>7} {'layer_us':>9} {'fused_us':>9} "
            f"{'fused_x':>7} {'gemms_us':>9} {'glue_us':>8} {'bound_us':>9} {'max_gain':>8} {'l1_frac':>7} "
            f"{'l2_frac':>7} {'rel_err':>8}")
    lines = [head]
    for r in rows:
        err = f"{r.rel_err:8.1e}" if r.rel_err is not None else " " * 8
        lines.append(f"{r.model:6} {r.routing:8} {r.tokens:5d} {r.pairs:6d} {r.active_experts:7d} "
                     f"{r.layer_us:9.1f} {r.fused_us:9.1f} {r.fused_gain:7.2f} "
                     f"{r.gemms_us:9.1f} {r.glue_us:8.1f} {r.bound_us:9.1f} "
                     f"{r.max_gain:8.2f} {r.l1_frac:7.2f} {r.l2_frac:7.2f} {err}")
    return "\n".join(lines)


def summarize(rows) -> dict:
    def gm(vals):
        vals = [v for v in vals if v == v and v > 0]
        return statistics.geometric_mean(vals) if vals else None

    out = {}
    for label, sel in (("tokens<=128", lambda r: r.tokens <= 128), ("tokens>=1024", lambda r: r.tokens >= 1024),
                       ("all", lambda r: True)):
        part = [r for r in rows if sel(r)]
        out[label] = {"shapes": len(part),
                      "glue_fraction_geomean": gm([r.glue_us / r.layer_us for r in part]),
                      "fused_gain_geomean": gm([r.fused_gain for r in part]),
                      "max_gain_geomean": gm([r.max_gain for r in part]),
                      "bound_fraction_geomean": gm([r.bound_us / r.layer_us for r in part]),
                      "gemm_fracs": [f for r in part for f in (r.l1_frac, r.l2_frac) if f == f]}
    out["wrong"] = [f"{r.model} {r.routing} T={r.tokens}" for r in rows if "WRONG" in r.notes]
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
                     f"(geomean), glue {_pct(s['glue_fraction_geomean'])} of the layer, the fused L1 "
                     f"{s['fused_gain_geomean']:.2f}x the layer's speed; most any kernel could gain "
                     f"{s['max_gain_geomean']:.2f}x")
    dec = summary["tokens<=128"]["gemm_fracs"]
    if dec:
        lines.append(f"  grouped GEMMs alone at <= 128 tokens: {sum(f >= 0.8 for f in dec)} of {len(dec)} at >= 0.8 "
                     f"of roofline + {GEMM_SLACK_US:g} us (lowest {min(dec):.2f})")
    lines.append(f"  wrong outputs: {', '.join(summary['wrong']) or 'none'}")
    return "\n".join(lines)
