"""Validation: the rules every matmul input obeys, checked before anything reaches a kernel.

Stage 2 of matmul. Each rule raises TypeError (wrong kind or dtype) or ValueError (wrong shape,
stride, device, value) naming the argument and the rule. What passes is a ``GemmProblem``: plain
integers the launcher hands to a kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .dtypes import FP8_DTYPES, OUT_DTYPES
from .hw import K_ALIGN, MAX_GROUPS, SCALE_BLOCK, TMA_ALIGN
from .intake import JAX, Tensor

_OUT_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32",
                "float": "float32"}
INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class GemmProblem:
    """A validated GEMM: C[M, N] = (A * As) @ (B * Bs)^T. Strides in elements."""

    m: int
    n: int
    k: int
    out_dtype: str
    device: int
    a_ptr: int
    lda: int
    b_ptr: int
    ldb: int
    sa_ptr: int
    sa_stride_m: int
    sa_stride_k: int
    sb_ptr: int
    sb_stride_n: int
    sb_stride_k: int
    out_shape: tuple     # a.shape[:-1] + (N,)


def normalize_out_dtype(out_dtype) -> str:
    """Accept 'bfloat16' / 'bf16', numpy / ml_dtypes / torch / jax dtypes; return our name."""
    if isinstance(out_dtype, str):
        name = out_dtype
    else:
        name = getattr(out_dtype, "name", None) or getattr(out_dtype, "__name__", None) or str(out_dtype)
        name = str(name).replace("torch.", "")
    name = _OUT_ALIASES.get(name, name)
    if name not in OUT_DTYPES:
        raise ValueError(f"out_dtype must be one of bfloat16, float16, float32; got {out_dtype!r}")
    return name


def check_block_size(block_size) -> None:
    try:
        ok = tuple(int(v) for v in block_size) == (SCALE_BLOCK, SCALE_BLOCK)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"block_size must be (128, 128) (1x128 activation groups, 128x128 weight "
                         f"blocks); got {block_size!r}")


def on_cpu_message(name: str) -> str:
    """The rule for an argument on the host (eager here, torch_ops' fake kernels at trace time)."""
    return f"{name} is on the CPU; fp8gemm needs CUDA arrays on one GPU"


def _require_cuda(t: Tensor, device: int | None) -> int:
    if t.device is None:
        raise ValueError(on_cpu_message(t.name))
    if device is not None and t.device != device:
        raise ValueError(f"{t.name} is on GPU {t.device} but a is on GPU {device}; "
                         f"all arrays must be on the same GPU")
    return t.device


def _require_dtype(t: Tensor, allowed, what: str) -> None:
    if t.dtype not in allowed:
        if t.dtype == "float8_e5m2":
            raise TypeError(f"{t.name} is float8_e5m2; fp8gemm takes FP8 E4M3 (float8_e4m3fn)")
        raise TypeError(f"{t.name} must be {what}; got dtype {t.dtype}")


def collapse_rows(t: Tensor, what: str) -> int:
    """Row stride (elements) of t viewed as 2-D [prod(shape[:-1]), shape[-1]].

    Leading dims must be collapsible into one strided dimension (size-1 dims are free).
    """
    dims = [(s, st) for s, st in zip(t.shape[:-1], t.strides[:-1]) if s != 1]
    if not dims:
        return 0
    for (size_outer, st_outer), (size_inner, st_inner) in zip(dims, dims[1:]):
        if st_outer != st_inner * size_inner:
            raise ValueError(f"{t.name}'s leading dimensions cannot be flattened into rows "
                             f"(shape {t.shape}, strides {t.strides}); {what}")
    return dims[-1][1]


def out_row_stride(out: Tensor, n: int) -> int:
    """Row stride (elements) of a validated ``out``; N for a single row."""
    ldc = collapse_rows(out, "pass a contiguous out")
    return ldc if ldc > 0 else n


def _extent(t: Tensor) -> tuple:
    """[lo, hi) byte range the strided view touches (empty views touch nothing)."""
    if any(s == 0 for s in t.shape):
        return (t.ptr, t.ptr)
    lo = hi = 0
    for size, st in zip(t.shape, t.strides):
        span = (size - 1) * st
        if span < 0:
            lo += span
        else:
            hi += span
    item = t.itemsize or 1
    return (t.ptr + lo * item, t.ptr + (hi + 1) * item)


def _check_operand(t: Tensor, rows: int, k: int) -> int:
    """A or B: K-contiguous rows, TMA-aligned. Returns the row stride in elements (= bytes)."""
    if t.shape[-1] > 1 and t.strides[-1] != 1:
        raise ValueError(f"{t.name} must be contiguous along K (stride 1 in the last dimension); "
                         f"got strides {t.strides}. Pass a contiguous copy")
    ld = collapse_rows(t, "pass a contiguous copy")
    if rows <= 1 or ld == 0:
        ld = -(-k // TMA_ALIGN) * TMA_ALIGN   # a single row: its stride is never used
    if ld <= 0 or ld % TMA_ALIGN:
        raise ValueError(f"{t.name}'s row stride must be a positive multiple of {TMA_ALIGN} bytes "
                         f"(TMA); got {ld}")
    if t.ptr % TMA_ALIGN:
        raise ValueError(f"{t.name}'s data pointer must be {TMA_ALIGN}-byte aligned (TMA); it is "
                         f"{t.ptr % TMA_ALIGN} bytes past. Pass a fresh contiguous copy")
    return ld


@dataclass(frozen=True)
class ArraySpec:
    """What trace-time checks see of an argument: its name (for messages), dtype name and shape
    (a torch fake tensor, a JAX abstract value)."""

    name: str
    dtype: str
    shape: tuple


@dataclass(frozen=True)
class GemmSignature:
    m: int
    n: int
    k: int
    out_dtype: str
    out_shape: tuple


def check_gemm_kinds(a, b, sa, sb) -> None:
    """The dtype rules of fp8gemm.matmul (arguments: intake Tensors or ArraySpecs)."""
    _require_dtype(a, FP8_DTYPES, "FP8 E4M3 (float8_e4m3fn) or its uint8/int8 bytes")
    _require_dtype(b, FP8_DTYPES, "FP8 E4M3 (float8_e4m3fn) or its uint8/int8 bytes")
    _require_dtype(sa, ("float32",), "float32 (per-token-group scales)")
    _require_dtype(sb, ("float32",), "float32 (128x128 block scales)")


def check_gemm_shapes(a, b, sa, sb, out, out_dtype) -> GemmSignature:
    """The shape and output-dtype rules of fp8gemm.matmul (arguments: intake Tensors or
    ArraySpecs; ``out`` may be None). Eager calls and trace time (fp8gemm.torch_ops' fake
    kernels, fp8gemm.jax's abstract evaluation) share them and their messages."""
    if len(a.shape) < 1:
        raise ValueError("a must have shape [..., K]; got a scalar")
    if len(b.shape) != 2:
        raise ValueError(f"b must have shape [N, K]; got shape {b.shape}")
    k = a.shape[-1]
    n = b.shape[0]
    if b.shape[1] != k:
        raise ValueError(f"a and b must share K: a.shape[-1] = {k}, b.shape[1] = {b.shape[1]}")
    if k <= 0 or k % K_ALIGN:
        raise ValueError(f"K must be a positive multiple of {K_ALIGN}; got K = {k}")
    if n < 1:
        raise ValueError(f"b must have N >= 1 rows; got b.shape = {b.shape}")
    m = 1
    for d in a.shape[:-1]:
        m *= d
    if m > INT32_MAX or n > INT32_MAX:
        raise ValueError(f"M and N must be < 2**31; got M = {m}, N = {n}")
    kb = -(-k // SCALE_BLOCK)
    nb = -(-n // SCALE_BLOCK)
    if sa.shape != a.shape[:-1] + (kb,):
        raise ValueError(f"a_scale must have shape a.shape[:-1] + (ceil(K/128),) = "
                         f"{a.shape[:-1] + (kb,)}; got {sa.shape}")
    if sb.shape != (nb, kb):
        raise ValueError(f"b_scale must have shape (ceil(N/128), ceil(K/128)) = {(nb, kb)}; "
                         f"got {sb.shape}")

    # ---- output
    if out is not None:
        if getattr(out, "framework", None) == JAX:
            raise TypeError("out= cannot be a JAX array (JAX arrays are immutable); "
                            "leave out=None and use the returned array")
        if getattr(out, "read_only", False):
            raise ValueError("out is read-only")
        if out.dtype not in OUT_DTYPES:
            raise TypeError(f"out must be bfloat16, float16 or float32; got dtype {out.dtype}")
        if out_dtype is None:
            out_dtype = out.dtype
        elif normalize_out_dtype(out_dtype) != out.dtype:
            raise TypeError(f"out has dtype {out.dtype} but out_dtype is "
                            f"{normalize_out_dtype(out_dtype)}")
    out_dtype = normalize_out_dtype("bfloat16" if out_dtype is None else out_dtype)
    return GemmSignature(m, n, k, out_dtype, a.shape[:-1] + (n,))


def check_gemm_dims(m, n, k, out_dtype) -> GemmSignature:
    """fp8gemm.matmul's shape and output-dtype rules for a call of M x N x K (fp8gemm.explain): the
    dimensions are integers >= 0, then check_gemm_shapes on the operands' shapes, its messages."""
    for name, v in (("M", m), ("N", n), ("K", k)):
        if isinstance(v, bool) or not hasattr(v, "__index__") or v < 0:
            raise ValueError(f"{name} must be a non-negative integer; got {v!r}")
    m, n, k = int(m), int(n), int(k)
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    return check_gemm_shapes(ArraySpec("a", "float8_e4m3fn", (m, k)), ArraySpec("b", "float8_e4m3fn", (n, k)),
                             ArraySpec("a_scale", "float32", (m, kb)), ArraySpec("b_scale", "float32", (nb, kb)),
                             None, out_dtype)


def validate_gemm(a: Tensor, b: Tensor, sa: Tensor, sb: Tensor, out: Tensor | None,
                  out_dtype) -> GemmProblem:
    """All the rules of fp8gemm.matmul. ``out_dtype`` may be None when ``out`` is given."""
    # ---- kinds and devices
    check_gemm_kinds(a, b, sa, sb)
    device = _require_cuda(a, None)
    for t in (b, sa, sb) + ((out,) if out is not None else ()):
        _require_cuda(t, device)

    # ---- shapes and the output's kind
    sig = check_gemm_shapes(a, b, sa, sb, out, out_dtype)
    m, n, k, out_dtype, out_shape = sig.m, sig.n, sig.k, sig.out_dtype, sig.out_shape

    if m == 0:
        if out is not None and out.shape != out_shape:
            raise ValueError(f"out must have shape {out_shape}; got {out.shape}")
        return GemmProblem(0, n, k, out_dtype, device, a.ptr, k, b.ptr, k, sa.ptr, 0, 0, sb.ptr,
                           0, 0, out_shape)

    # ---- layouts
    lda = _check_operand(a, m, k)
    ldb = _check_operand(b, n, k)
    sa_stride_m = collapse_rows(sa, "pass a_scale as [M, ceil(K/128)]")
    sa_stride_k = sa.strides[-1]
    sb_stride_n, sb_stride_k = sb.strides

    if out is not None:
        if out.shape != out_shape:
            raise ValueError(f"out must have shape {out_shape}; got {out.shape}")
        if n > 1 and out.strides[-1] != 1:
            raise ValueError(f"out must be contiguous along N (stride 1 in the last dimension); "
                             f"got strides {out.strides}")
        ldc = collapse_rows(out, "pass a contiguous out")
        if m > 1 and ldc < n:
            raise ValueError(f"out's rows overlap (row stride {ldc} < N = {n})")
        lo, hi = _extent(out)
        for t in (a, b, sa, sb):
            tlo, thi = _extent(t)
            if lo < thi and tlo < hi:
                raise ValueError(f"out overlaps {t.name} in memory; pass a separate output array")

    return GemmProblem(m, n, k, out_dtype, device, a.ptr, lda, b.ptr, ldb, sa.ptr, sa_stride_m,
                       sa_stride_k, sb.ptr, sb_stride_n, sb_stride_k, out_shape)


# ---- grouped GEMM (MoE) ------------------------------------------------------------------------



@dataclass(frozen=True)
class GroupedProblem:
    """A validated grouped GEMM. ``gemm`` describes all rows of A and C (M = P rows, or G * max_rows
    masked) against group 0's [N, K] weights; group g's weights follow at row g * N."""

    gemm: GemmProblem
    num_groups: int
    group_rows: int        # masked: rows per group (counts index them); 0: contiguous (offsets)
    groups_ptr: int        # int32 offsets [G + 1] or counts [G]
    sb_stride_g: int       # elements between groups' block scales


def check_group_layout(a, b, sb, groups, masked: bool) -> tuple:
    """The group-layout rules of the grouped GEMMs (arguments: intake Tensors or ArraySpecs):
    b [G, N, K], b_scale [G, ceil(N/128), ceil(K/128)], the int32 offsets [G + 1] (contiguous) or
    counts [G] (masked), and a's rank. Returns (G, N, K). Eager calls and the torch operators'
    fake kernels share them."""
    if len(b.shape) != 3:
        raise ValueError(f"b must have shape [G, N, K] (one weight matrix per group); got shape {b.shape}")
    g, n, k = b.shape
    if not 1 <= g <= MAX_GROUPS:
        raise ValueError(f"b must hold 1..{MAX_GROUPS} groups; got G = {g}")
    if g * n > INT32_MAX:
        raise ValueError(f"G x N must be < 2**31; got {g} x {n}")
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    if sb.shape != (g, nb, kb):
        raise ValueError(f"b_scale must have shape (G, ceil(N/128), ceil(K/128)) = {(g, nb, kb)}; got {sb.shape}")
    what = "counts" if masked else "offsets"
    want = (g,) if masked else (g + 1,)
    if groups.dtype != "int32":
        raise TypeError(f"{groups.name} must be int32; got dtype {groups.dtype}")
    if groups.shape != want:
        raise ValueError(f"{groups.name} must have shape {want} ({what} of G = {g} groups); got {groups.shape}")
    if masked:
        if len(a.shape) != 3 or a.shape[0] != g:
            raise ValueError(f"a must have shape [G, max_rows, K] with G = {g} (b's groups); got {a.shape}")
    elif len(a.shape) != 2:
        raise ValueError(f"a must have shape [P, K] (all groups' rows, group by group); got {a.shape}")
    return g, n, k


def check_grouped_signature(a, b, sa, sb, groups, out, out_dtype, masked: bool) -> GemmSignature:
    """The grouped GEMMs' trace-time rules in the eager order (arguments: ArraySpecs; ``out`` may
    be None): the group layout, the kinds, then matmul's shape rules for one group's weights."""
    g, n, k = check_group_layout(a, b, sb, groups, masked)
    check_gemm_kinds(a, b, sa, sb)
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    return check_gemm_shapes(a, replace(b, shape=(n, k)), sa, replace(sb, shape=(nb, kb)), out, out_dtype)


def validate_grouped(a: Tensor, b: Tensor, sa: Tensor, sb: Tensor, groups: Tensor, out: Tensor | None,
                     out_dtype, masked: bool) -> GroupedProblem:
    """The rules of fp8gemm.grouped_matmul_contiguous (masked=False) and _masked (masked=True): those
    of matmul for the rows of A against one group's weights, plus the group layout."""
    g, n, k = check_group_layout(a, b, sb, groups, masked)
    if g > 1 and n > 0 and b.strides[0] != n * b.strides[1]:
        raise ValueError(f"b's groups must follow each other without gaps (stride along G = N x the "
                         f"row stride); got strides {b.strides}. Pass a contiguous b")
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    if (g if masked else g + 1) > 1 and groups.strides[0] != 1:
        raise ValueError(f"{groups.name} must be contiguous; got stride {groups.strides[0]}")

    # One group's weights and scales as the plain GEMM's b and b_scale: every rule of matmul.
    b0 = replace(b, shape=(n, k), strides=b.strides[1:])
    sb0 = replace(sb, shape=(nb, kb), strides=sb.strides[1:])
    p = validate_gemm(a, b0, sa, sb0, out, out_dtype)
    device = p.device
    _require_cuda(groups, device)
    if out is not None and p.m > 0:
        lo, hi = _extent(out)
        for t in (b, sb, groups):
            tlo, thi = _extent(t)
            if lo < thi and tlo < hi:
                raise ValueError(f"out overlaps {t.name} in memory; pass a separate output array")
    return GroupedProblem(p, g, a.shape[1] if masked else 0, groups.ptr, sb.strides[0])
