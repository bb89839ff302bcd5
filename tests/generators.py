"""Test helpers: the trace, NaN-poisoned buffers, conversions to float64. Random operands come from
fp8gemm.testing (shared with the benchmark)."""
from __future__ import annotations

import csv
from pathlib import Path

from fp8gemm.testing import Case, random_case  # noqa: F401  (re-exported for the tests)
from fp8gemm.testing import as_float64 as to_cupy_f64  # noqa: F401

TRACE = Path(__file__).resolve().parent.parent / "fp8gemm" / "deepseek_v4_flash.csv"

FP8_NAN = 0x7F


def trace_shapes():
    with open(TRACE) as f:
        return [(int(r["M"]), int(r["N"]), int(r["K"])) for r in csv.DictReader(f)]


def poisoned(arr, fill, pad_rows=2, pad_cols=16, col0=0):
    """A copy of ``arr`` as a view inside a larger buffer whose border holds ``fill``.

    Returns (view, buffer). The view starts pad_rows // 2 rows and ``col0`` columns in; the row
    stride grows by pad_cols (keep it a multiple of 16 bytes for FP8 operands).
    """
    import cupy as xp
    rows, cols = arr.shape
    buf = xp.full((rows + pad_rows, cols + pad_cols), fill, dtype=arr.dtype)
    r0 = pad_rows // 2
    view = buf[r0:r0 + rows, col0:col0 + cols]
    view[...] = arr
    return view, buf


def outside(buf, r0, c0, rows, cols):
    """The elements of buf outside the window [r0:r0+rows, c0:c0+cols], flattened."""
    import cupy as xp
    mask = xp.ones(buf.shape, dtype=bool)
    mask[r0:r0 + rows, c0:c0 + cols] = False
    return buf[mask]
