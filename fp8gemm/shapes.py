"""Shape lists: the built-in DeepSeek-V4-Flash trace (264 (M, N, K) GEMMs, fp8gemm/deepseek_v4_flash.csv)
and CSV files of the same form (columns M, N, K), read by fp8gemm.precompile, fp8gemm-bench and
fp8gemm-tune."""
from __future__ import annotations

import csv
from importlib import resources
from pathlib import Path


def trace_path() -> Path:
    """The built-in trace's file."""
    return Path(str(resources.files("fp8gemm") / "deepseek_v4_flash.csv"))


def read_shapes(path) -> list:
    """[(M, N, K)] from a CSV file with columns M, N, K (others ignored); ValueError naming the
    missing columns."""
    with open(path) as f:
        reader = csv.DictReader(f)
        missing = {"M", "N", "K"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path} lacks column(s) {', '.join(sorted(missing))}")
        return [(int(r["M"]), int(r["N"]), int(r["K"])) for r in reader]
