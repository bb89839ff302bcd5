"""Selection: a tuned table per GPU (plain JSON beside this file), then a shape-based fallback.

``VARIANTS`` maps each kernel file stem to its descriptor class (variant.py says what one holds).
``select`` returns the table's entry for the nearest tuned M of the same (N, K) when one lies
within a factor of 2 of M and is valid, else the fallback's choice. The table comes from
``fp8gemm-tune`` (bench/tune.py).

Set FP8GEMM_PRINT_CONFIG=1 to print each new decision once.
"""
from __future__ import annotations

import functools
import json
import os
import warnings
from dataclasses import fields, replace
from pathlib import Path

from ..hw import gpu_key  # noqa: F401 - the tables' GPU names (fp8gemm-tune: sel.gpu_key)
from . import gemv, short_k
from .dense import Dense
from .gemv import Gemv
from .general import SWAP_MAX_M, General, SwapAB
from .short_k import ShortK
from .variant import DEFAULT_NUM_SMS, Candidate, GemmDesc
from .wg3 import MIN_M as WG3_MIN_M
from .wg3 import Wg3

VARIANTS = {cls.variant: cls for cls in (General, SwapAB, ShortK, Gemv, Wg3, Dense)}
# The order fp8gemm-tune searches them in after the fallback's own choice, then the dense kernel's
# few candidates (at most 7, from M = 65) beyond its limit.
TUNER_ORDER = (Gemv, ShortK, Wg3, General)
EXTRA_CANDIDATES = (Dense,)


def variants() -> tuple:
    return tuple(VARIANTS)


def is_valid(desc: GemmDesc, c: Candidate) -> bool:
    return type(c) in VARIANTS.values() and c.is_valid(desc)


def from_entry(entry: dict, reason: str = "") -> Candidate:
    """A candidate from a table entry: its ``variant`` and that variant's knobs (defaults for any
    the entry leaves out; other keys ignored)."""
    cls = VARIANTS.get(entry.get("variant"))
    if cls is None:
        raise ValueError(f"unknown variant {entry.get('variant')!r}; known: {', '.join(VARIANTS)}")
    knobs = {f.name: int(entry[f.name]) for f in fields(cls) if f.name != "reason" and f.name in entry}
    return cls(**knobs, reason=reason)


SWAP_ESTIMATE_BIAS = 1.1       # swap-AB's estimate against 64-row tiles': 1.1x too low (fitted)
# The dense kernel in the fallback (Dense.model) from M = 65, on by default since the GPU suite
# passed with it (H100, session 44); FP8GEMM_DENSE_MODEL=0 keeps the older kernels' model. Scored
# on the H100's tune state at 1.06 / 1.03 / 1.01x the tuned best where the older model ran 1.14 /
# 1.16 / 1.10x (bench/NOTES.md, session 42).
DENSE_MODEL = os.environ.get("FP8GEMM_DENSE_MODEL", "1") != "0"


# ---- the table ------------------------------------------------------------------------------------

TABLE_DIR = Path(__file__).parent          # the shipped tables, <gpu>.json
SHIPPED_GPU = "h200"                        # the GPU the shipped table was tuned on
NO_TABLE = "none"                           # a gpu key with no table: the fallback model alone


def user_table_dir() -> Path:
    """Where fp8gemm-tune writes and the library looks first: $FP8GEMM_TABLE_DIR, else
    ~/.cache/fp8gemm/tables."""
    env = os.environ.get("FP8GEMM_TABLE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "fp8gemm" / "tables"


_warned = set()


def table_path(gpu: str) -> Path | None:
    """The table a GPU uses: $FP8GEMM_TABLE (a file, for every GPU), else the user's
    <gpu>.json (user_table_dir), else the shipped one, else (with a one-time warning) the
    shipped H200 table; None for NO_TABLE."""
    if gpu == NO_TABLE:
        return None
    env = os.environ.get("FP8GEMM_TABLE")
    if env:
        if not Path(env).is_file():
            raise FileNotFoundError(f"FP8GEMM_TABLE={env} is not a file (a table fp8gemm-tune wrote)")
        return Path(env)
    for path in (user_table_dir() / f"{gpu}.json", TABLE_DIR / f"{gpu}.json"):
        if path.is_file():
            return path
    if gpu not in _warned:
        _warned.add(gpu)
        warnings.warn(f"fp8gemm: no dispatch table for this GPU ({gpu}); using the {SHIPPED_GPU.upper()}'s. "
                      f"`fp8gemm-tune` writes one to {user_table_dir()}, where fp8gemm finds it "
                      f"(or set FP8GEMM_TABLE to a table file).", RuntimeWarning, stacklevel=4)
    return TABLE_DIR / f"{SHIPPED_GPU}.json"


@functools.lru_cache(maxsize=None)
def _read_table(path: str) -> dict:
    raw = json.loads(Path(path).read_text())
    table = {}
    for entry in raw.get("entries", []):
        cand = from_entry(entry, f"table {Path(path).name}")
        table.setdefault((int(entry["n"]), int(entry["k"])), []).append((int(entry["m"]), cand))
    for rows in table.values():
        rows.sort(key=lambda r: r[0])
    return table


def load_table(gpu: str = SHIPPED_GPU) -> dict:
    """{(N, K): [(M, Candidate), ...] sorted by M} from the table ``gpu`` uses (table_path);
    empty for NO_TABLE or a missing file. Files are read once per process (cache_clear
    forgets them)."""
    path = table_path(gpu)
    if path is None or not path.exists():
        return {}
    return _read_table(str(path))


load_table.cache_clear = _read_table.cache_clear


@functools.lru_cache(maxsize=4096)
def select(m: int, n: int, k: int, out_dtype: str = "bfloat16", gpu: str = SHIPPED_GPU,
           force_variant: str | None = None, num_sms: int = DEFAULT_NUM_SMS) -> Candidate:
    """The kernel for one shape. ``force_variant`` restricts the choice to one variant."""
    desc = GemmDesc(m, n, k, out_dtype)
    if force_variant is not None and force_variant not in VARIANTS:
        raise ValueError(f"unknown variant {force_variant!r}; known: {', '.join(VARIANTS)}")
    rows = load_table(gpu).get((n, k), [])
    if rows:
        tuned_m, cand = min(rows, key=lambda r: (abs(r[0] - m), r[0]))
        # NOTES: only near its tuned M: an entry tuned at M=4096 says nothing about M=1 (swap-AB).
        if (tuned_m <= 2 * m and m <= 2 * tuned_m and cand.is_valid(desc)
                and force_variant in (None, cand.variant)):
            return _report(desc, replace(cand, reason=f"{cand.reason}, tuned at M={tuned_m}"))
    return _report(desc, fallback(desc, num_sms, force_variant))


def fallback(desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS, force_variant: str | None = None,
             dense: bool = True) -> Candidate:
    """The shape-based choice: the decode kernel where Gemv.takes, short-K where ShortK.takes,
    swap-AB up to SWAP_MAX_M tokens, then (with ``dense`` and DENSE_MODEL) the dense kernel where its model
    chooses one (Dense.model: bf16 / fp16 out, K / 128 a multiple of 4), else the general kernel
    or, from WG3_MIN_M rows (bf16 / fp16 out), the three-warpgroup kernel where its estimate is at
    most the general kernel's (ties, HBM-bound at short K: measured faster, its epilogues overlap).
    ``force_variant`` picks the variant (its own fallback); ShortK needs K <= 256, Gemv M <= 16,
    Wg3 bf16 / fp16 out. ``dense=False``: never the dense kernel (fp8gemm/api.py, for an As its
    TMA cannot read)."""
    if force_variant is not None:
        return VARIANTS[force_variant].fallback(desc, num_sms)
    if Gemv.takes(desc):
        return Gemv.fallback(desc, num_sms, f"fallback: gemv (M={desc.m} <= {gemv.MAX_M}, N={desc.n} <= {gemv.MAX_N}, "
                                            f"K={desc.k} > {short_k.MAX_K}): {-(-desc.n // gemv.ROWS)} CTAs of "
                                            f"{gemv.ROWS} rows")
    if ShortK.takes(desc, num_sms):
        return ShortK.fallback(desc, num_sms)
    if desc.m <= SWAP_MAX_M:
        # NOTES: from TILE64_MIN_M tokens 64-row tiles replace swap-AB where their estimate is
        # below SWAP_ESTIMATE_BIAS times swap-AB's (the tuned trace: 64-row tiles won at M = 48-64
        # on N >= 1536 with K = 4096 and N >= 4096 with K = 1024, by up to 1.25x; swap-AB at
        # M <= 32 and at N = 512: bench/NOTES.md).
        tile64 = General.fallback_64(desc, num_sms)
        if tile64 is not None and tile64[0] < SWAP_ESTIMATE_BIAS * SwapAB.estimate_us(desc, num_sms):
            return tile64[1]
        return SwapAB.fallback(desc, num_sms)
    model = Dense.model(desc, num_sms) if dense and DENSE_MODEL else None
    if model is not None:
        return model
    general = General.fallback(desc, num_sms)
    if desc.m >= WG3_MIN_M and desc.out_dtype != "float32":
        cost, cost3 = General.estimate_us(desc, num_sms), Wg3.estimate_us(desc, num_sms)
        if cost3 <= cost:
            return Wg3.fallback(desc, num_sms, f"fallback: wg3, 192 x 128 tiles estimated {cost3:.1f} us against "
                                               f"{cost:.1f} us for the general kernel's 128 x {general.block_n}")
    return general


_printed = set()


def _report(desc: GemmDesc, cand: Candidate) -> Candidate:
    if os.environ.get("FP8GEMM_PRINT_CONFIG") == "1" and (desc, cand.key()) not in _printed:
        _printed.add((desc, cand.key()))
        print(f"fp8gemm: M={desc.m} N={desc.n} K={desc.k} {desc.out_dtype} -> {cand.describe()} ({cand.reason})")
    return cand


def explain(m: int, n: int, k: int, out_dtype: str = "bfloat16", gpu: str = SHIPPED_GPU) -> str:
    """A sentence saying which kernel a shape gets and why; fp8gemm.matmul's rules first, with its
    messages (a shape matmul refuses raises here too)."""
    from ..validate import check_gemm_dims
    sig = check_gemm_dims(m, n, k, out_dtype)
    m, n, k, out_dtype = sig.m, sig.n, sig.k, sig.out_dtype
    if m == 0:
        return f"M=0 N={n} K={k} {out_dtype}: no kernel (matmul returns the empty [0, {n}] result without a launch)"
    c = select(m, n, k, out_dtype, gpu)
    return f"M={m} N={n} K={k} {out_dtype}: {c.describe()}, smem {c.smem_bytes(out_dtype)} B -- {c.reason}"
