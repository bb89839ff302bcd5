"""Shape lists: the built-in DeepSeek-V4-Flash trace (264 (M, N, K) GEMMs, fp8gemm/deepseek_v4_flash.csv),
the unseen list (fp8gemm/other_models.csv: 32 (N, K) of other models' linear layers, none of them
the trace's, at 7 M values, 6 of them not the trace's; fp8gemm-bench --unseen measures how far the
dispatcher's tuning carries beyond the trace) and CSV files of the same form (columns M, N, K;
others ignored), read by fp8gemm.precompile, fp8gemm-bench and fp8gemm-tune."""
from __future__ import annotations

import csv
from importlib import resources
from pathlib import Path


def trace_path() -> Path:
    """The built-in trace's file."""
    return Path(str(resources.files("fp8gemm") / "deepseek_v4_flash.csv"))


def other_models_path() -> Path:
    """The unseen list's file: DeepSeek-V3, Qwen3-235B-A22B, Qwen3-30B-A3B, Qwen3-32B,
    Llama-3.1-8B / 70B and gpt-oss-120b linear layers as C = A @ B^T (N = out features, K = in
    features; model and layer columns say which), with an N tail (576) and K tails (2880)."""
    return Path(str(resources.files("fp8gemm") / "other_models.csv"))


def read_shapes(path) -> list:
    """[(M, N, K)] from a CSV file with columns M, N, K (others ignored); ValueError naming the
    missing columns."""
    with open(path) as f:
        reader = csv.DictReader(f)
        missing = {"M", "N", "K"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path} lacks column(s) {', '.join(sorted(missing))}")
        return [(int(r["M"]), int(r["N"]), int(r["K"])) for r in reader]
