"""Benchmark results: rows, roofline math, CSV / JSON writers, the summary and the plot.

Pure Python (no GPU): the CPU tests cover it.
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, field, fields

from fp8gemm.dtypes import OUT_BYTES

from .peers import PEERS

M_BANDS = (("M<=64", 0, 64), ("64<M<=256", 65, 256), ("256<M<1024", 257, 1023), ("M>=1024", 1024, 1 << 62))
FIXED_COST_US = 2.0   # every kernel's launch-to-finish floor on the H200 (DESIGN.md)


@dataclass
class Row:
    M: int
    N: int
    K: int
    out_dtype: str
    variant: str = ""
    ours_us: float | None = None
    host_us: float | None = None
    cublaslt_us: float | None = None
    triton_us: float | None = None
    deepgemm_us: float | None = None
    invariant_us: float | None = None      # fp8gemm.matmul(batch_invariant=True), with --batch-invariant
    roofline_us: float | None = None
    max_rel_err: float | None = None
    tflops: float | None = None
    gbps: float | None = None
    frac_roofline: float | None = None
    notes: str = field(default="")


CSV_COLUMNS = [f.name for f in fields(Row)]


def gemm_bytes(m: int, n: int, k: int, out_dtype: str) -> int:
    """Fewest bytes a GEMM moves: A and B once, both fp32 scale grids, C once."""
    kb, nb = -(-k // 128), -(-n // 128)
    return m * k + n * k + 4 * (m * kb + nb * kb) + OUT_BYTES[out_dtype] * m * n


def roofline_us(m: int, n: int, k: int, out_dtype: str, bw_bytes_per_s: float, peak_flops: float) -> float:
    return max(gemm_bytes(m, n, k, out_dtype) / bw_bytes_per_s, 2.0 * m * n * k / peak_flops) * 1e6


def fill_derived(row: Row, bw: float, peak: float) -> Row:
    row.roofline_us = roofline_us(row.M, row.N, row.K, row.out_dtype, bw, peak)
    if row.ours_us:
        row.tflops = 2.0 * row.M * row.N * row.K / (row.ours_us * 1e-6) / 1e12
        row.gbps = gemm_bytes(row.M, row.N, row.K, row.out_dtype) / (row.ours_us * 1e-6) / 1e9
        row.frac_roofline = (row.roofline_us + FIXED_COST_US) / row.ours_us
    return row


def _fmt(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def write_csv(rows, path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for r in rows:
            w.writerow([_fmt(getattr(r, c)) for c in CSV_COLUMNS])


def read_csv(path):
    rows = []
    with open(path) as f:
        for rec in csv.DictReader(f):
            kw = {}
            for fl in fields(Row):
                v = rec.get(fl.name, "")
                if fl.name in ("M", "N", "K"):
                    kw[fl.name] = int(v)
                elif fl.name in ("out_dtype", "variant", "notes"):
                    kw[fl.name] = v
                else:
                    kw[fl.name] = float(v) if v != "" else None
            rows.append(Row(**kw))
    return rows


def write_json(meta: dict, rows, path) -> None:
    doc = dict(meta)
    doc["summary"] = summarize(rows)
    with open(path, "w") as f:
        json.dump(doc, f, indent=2, sort_keys=True)


def geomean(values):
    vals = [v for v in values if v and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def speedup(row: Row, peer: str):
    """peer time / our time (> 1: we are faster); None when either is missing."""
    theirs = getattr(row, f"{peer}_us")
    if theirs is None or not row.ours_us:
        return None
    return theirs / row.ours_us


def best_peer_us(row: Row):
    times = [getattr(row, f"{p}_us") for p in PEERS if getattr(row, f"{p}_us") is not None]
    return min(times) if times else None


def summarize(rows) -> dict:
    """Geomean speedups per peer (and over the best peer per shape), overall and per M band, the
    shapes where we are slower, and the roofline fraction."""
    out = {}
    for peer in PEERS + ("best",):
        def sp(r, peer=peer):
            if peer == "best":
                b = best_peer_us(r)
                return b / r.ours_us if (b and r.ours_us) else None
            return speedup(r, peer)
        pairs = [(r, sp(r)) for r in rows]
        pairs = [(r, s) for r, s in pairs if s is not None]
        if not pairs:
            continue
        bands = {}
        for label, lo, hi in M_BANDS:
            g = geomean([s for r, s in pairs if lo <= r.M <= hi])
            if g is not None:
                bands[label] = g
        out[peer] = {
            "shapes": len(pairs),
            "geomean_speedup": geomean([s for _, s in pairs]),
            "per_m_band": bands,
            "slower_on": [f"{r.M}x{r.N}x{r.K}" for r, s in pairs if s < 1.0],
        }
    fr = [r.frac_roofline for r in rows if r.frac_roofline]
    if fr:
        out["frac_of_roofline_plus_2us"] = {"geomean": geomean(fr), "min": min(fr), "max": max(fr)}
    invariant = summarize_invariant(rows)
    if invariant:
        out["batch_invariant"] = invariant
    return out


def _shape_name(row: Row) -> str:
    return f"{row.M}x{row.N}x{row.K}"


M_BAND_TESTS = tuple((label, lambda r, lo=lo, hi=hi: lo <= r.M <= hi) for label, lo, hi in M_BANDS)


def time_ratios(rows, num: str, den: str, bands=M_BAND_TESTS, name=_shape_name, band_key: str = "per_m_band"):
    """Geomean of ``num`` time / ``den`` time over the rows that have both (positive, not NaN),
    overall and per band (``bands``: (label, test of a row)), and the row where the ratio is
    largest (``name``: its label); None where no row has both. Also bench/moe.py's (token ranges)."""
    def timed(v):
        return v is not None and v == v and v > 0

    pairs = [(r, getattr(r, num) / getattr(r, den)) for r in rows
             if timed(getattr(r, num)) and timed(getattr(r, den))]
    if not pairs:
        return None
    per_band = {label: geomean([q for r, q in pairs if test(r)]) for label, test in bands}
    worst_row, worst = max(pairs, key=lambda p: p[1])
    return {"shapes": len(pairs), "geomean": geomean([q for _, q in pairs]),
            band_key: {k: v for k, v in per_band.items() if v is not None},
            "max": worst, "max_on": name(worst_row)}


def summarize_invariant(rows) -> dict:
    """The batch-invariant mode's cost (``--batch-invariant``): its time over our default mode's
    (same run, same timer) and over DeepGEMM's where that peer was timed; > 1: the mode is slower."""
    out = {}
    for against, col in (("default", "ours_us"), ("deepgemm", "deepgemm_us")):
        ratios = time_ratios(rows, "invariant_us", col)
        if ratios:
            out[f"vs_{against}"] = ratios
    return out


def format_table(rows) -> str:
    """One line per row; the batch-invariant mode's column where a row has it."""
    inv = any(r.invariant_us is not None for r in rows)
    head = (f"{'M':>6} {'N':>6} {'K':>5} {'variant':<22} {'ours':>8} " + (f"{'invariant':>9} " if inv else "") +
            f"{'cuBLASLt':>9} {'triton':>8} {'deepgemm':>9} {'roof':>7} {'frac':>5} {'x best':>6} {'TFLOP/s':>8} "
            f"{'err':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        b = best_peer_us(r)
        lines.append(
            f"{r.M:>6} {r.N:>6} {r.K:>5} {r.variant[:22]:<22} {_num(r.ours_us):>8} "
            + (f"{_num(r.invariant_us):>9} " if inv else "") +
            f"{_num(r.cublaslt_us):>9} {_num(r.triton_us):>8} {_num(r.deepgemm_us):>9} {_num(r.roofline_us):>7} "
            f"{_num(r.frac_roofline, 2):>5} {_num(b / r.ours_us if b and r.ours_us else None, 2):>6} "
            f"{_num(r.tflops, 0):>8} {_sci(r.max_rel_err):>8}")
    return "\n".join(lines)


def format_summary(summary: dict) -> str:
    lines = ["Summary (speedup = peer time / fp8gemm time; > 1 means fp8gemm is faster)"]
    for peer, s in summary.items():
        if peer == "batch_invariant":
            continue
        if peer.startswith("frac"):
            lines.append(f"  fraction of (roofline + 2 us): geomean {s['geomean']:.2f}, "
                         f"min {s['min']:.2f}, max {s['max']:.2f}")
            continue
        bands = ", ".join(f"{k}: {v:.2f}x" for k, v in s["per_m_band"].items())
        lines.append(f"  vs {peer:<9} geomean {s['geomean_speedup']:.2f}x over {s['shapes']} shapes ({bands})")
        slow = s["slower_on"]
        lines.append(f"      slower on {len(slow)} shape(s)" + (": " + ", ".join(slow[:12]) +
                                                                (" ..." if len(slow) > 12 else "") if slow else ""))
    lines += format_invariant(summary.get("batch_invariant"))
    return "\n".join(lines)


def format_invariant(invariant, what: str = "mode", noun: str = "shapes", band_key: str = "per_m_band") -> list:
    """The summary's lines on the batch-invariant mode's cost (summarize_invariant; bench/moe.py's
    for the layer), none without it."""
    if not invariant:
        return []
    lines = [f"  batch-invariant {what} (time ratio = its time / the other's; > 1 means the mode is slower)"]
    for against, s in invariant.items():
        bands = ", ".join(f"{k}: {v:.3f}" for k, v in s[band_key].items())
        lines.append(f"    {against.replace('_', ' '):<12} geomean {s['geomean']:.3f} over {s['shapes']} {noun} "
                     f"({bands}); most {s['max']:.3f} at {s['max_on']}")
    return lines


def _num(v, digits=1):
    return "" if v is None else f"{v:.{digits}f}"


def _sci(v):
    return "" if v is None else f"{v:.1e}"


def plot_title(gpu: str | None, timer: str = "cupti") -> str:
    """The plot's title: the GPU that ran and the timer that timed."""
    how = "CUDA-graph replay" if timer == "graph" else "CUPTI device time"
    return f"fp8gemm speedup over peers vs M ({gpu or 'unknown GPU'}, L2 cold, {how})"


def plot(rows, path, title: str | None = None) -> None:
    """Speedup over each peer versus M, one panel per (N, K), log-x, a line at 1.0."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = sorted({(r.N, r.K) for r in rows})
    cols = 4 if len(pairs) > 3 else len(pairs)
    nrows = -(-len(pairs) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3 * nrows), squeeze=False, sharey=True)
    for ax, (n, k) in zip(axes.flat, pairs):
        sub = sorted((r for r in rows if (r.N, r.K) == (n, k)), key=lambda r: r.M)
        for peer in PEERS:
            pts = [(r.M, speedup(r, peer)) for r in sub if speedup(r, peer)]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=peer)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_title(f"N={n} K={k}", fontsize=9)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(pairs):]:
        ax.axis("off")
    axes.flat[0].set_ylabel("speedup (peer / fp8gemm)")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title or plot_title(None))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def row_dict(row: Row) -> dict:
    return asdict(row)
