"""fp8gemm as PyTorch operators: ``torch.ops.fp8gemm.*``, for torch.compile and CUDA graphs.

``import fp8gemm.torch_ops`` registers, once per process:

  fp8gemm::matmul(a, b, a_scale, b_scale, out_dtype="bfloat16", batch_invariant=False) -> Tensor
  fp8gemm::matmul_out(a, b, a_scale, b_scale, out, batch_invariant=False) -> ()   (writes ``out``)
  fp8gemm::grouped_matmul_contiguous(a, b, a_scale, b_scale, offsets, out_dtype="bfloat16",
                                     precise_fp32=True, batch_invariant=False) -> Tensor
  fp8gemm::grouped_matmul_contiguous_out(a, b, a_scale, b_scale, offsets, out, precise_fp32=True,
                                         batch_invariant=False)
  fp8gemm::grouped_matmul_masked(a, b, a_scale, b_scale, counts, out_dtype="bfloat16",
                                 expected_rows=None, batch_invariant=False) -> Tensor
  fp8gemm::grouped_matmul_masked_out(a, b, a_scale, b_scale, counts, out, expected_rows=None,
                                     batch_invariant=False)
  fp8gemm::moe(x, topk_ids, topk_weights, w1, w1_scale, w2, w2_scale, x_scale=None, limit=10.0,
               fused=None, batch_invariant=False) -> Tensor
  fp8gemm::quantize_per_token_group(x, eps=1e-10) -> (q, scale)

Each is a ``torch.library.custom_op`` whose real kernel is fp8gemm's (``fp8gemm.matmul``, the
grouped GEMMs, ``fp8gemm.moe``, ``fp8gemm.quantize_per_token_group``, on the current stream) and whose fake kernel applies the
same kind and shape rules, with the same messages, to fake or meta tensors and returns outputs of
the right shape and dtype. So ``torch.compile(fullgraph=True)`` traces a model that calls them
into one graph with no break in our Python, and the rules hold at trace time.

The operators' ``batch_invariant`` is the eager functions' (fp8gemm.matmul, the grouped GEMMs,
fp8gemm.moe; dispatch/invariant.py) as a plain bool in the schema: the wrappers below take
``batch_invariant=None`` and resolve it to the process-wide mode in Python, so that a compiled
graph holds the mode as a constant (a flip of the switch makes torch.compile trace again).

The wrappers below call the operators with the eager API's argument forms: ``matmul`` as
fp8gemm.matmul (``out=`` included), ``w8a8_block_fp8_matmul`` in vLLM's argument order,
``fp8_gemm_nt`` in DeepGEMM's, each with an optional ``bias`` added to the product; the grouped
GEMMs and the MoE layer in the eager forms, and DeepGEMM's grouped forms
(``m_grouped_fp8_gemm_nt_contiguous`` with its m_indices, ``m_grouped_fp8_gemm_nt_masked``), which
keep DeepGEMM's arguments and so follow the process-wide batch-invariant mode.
"""
from __future__ import annotations

import logging
import os
from typing import Optional

import torch

from .dispatch.invariant import resolve as resolve_invariant
from .dtypes import SWIGLU_LIMIT
from .validate import (ArraySpec, check_block_size, check_gemm_kinds, check_gemm_shapes, check_group_layout,
                       check_grouped_signature, normalize_out_dtype, on_cpu_message)

_OUT_TORCH = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
_IN_TYPES = ("bfloat16", "float16", "float32")
GROUP = 128
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class _OwnRuleErrors(logging.Filter):
    """torch's fake-tensor mode logs every TypeError a fake kernel raises (an ERROR record with the
    whole traceback, ~30 lines) and then re-raises it. Ours are the rules' messages, which the
    caller gets as the exception: drop the log record of a TypeError raised in fp8gemm's code."""

    def filter(self, record) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, TypeError):
            return True
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        return tb is None or not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_PACKAGE_DIR + os.sep)


logging.getLogger("torch._subclasses.fake_tensor").addFilter(_OwnRuleErrors())


def _spec(t: torch.Tensor, name: str) -> ArraySpec:
    return ArraySpec(name, str(t.dtype).replace("torch.", ""), tuple(t.shape))


def _check_device(*tensors) -> None:
    """Trace-time form of the eager device rules: every argument on one CUDA device."""
    dev = tensors[0][0].device
    for t, name in tensors:
        if t.device.type not in ("cuda", "meta"):
            raise ValueError(on_cpu_message(name))
        if t.device != dev:
            raise ValueError(f"{name} is on {t.device} but a is on {dev}; all arrays must be on the same GPU")


def _signature(a, b, a_scale, b_scale, out, out_dtype):
    specs = [_spec(a, "a"), _spec(b, "b"), _spec(a_scale, "a_scale"), _spec(b_scale, "b_scale")]
    check_gemm_kinds(*specs)
    _check_device((a, "a"), (b, "b"), (a_scale, "a_scale"), (b_scale, "b_scale"),
                  *(((out, "out"),) if out is not None else ()))
    return check_gemm_shapes(*specs, _spec(out, "out") if out is not None else None, out_dtype)


@torch.library.custom_op("fp8gemm::matmul", mutates_args=())
def _matmul(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
            out_dtype: str = "bfloat16", batch_invariant: bool = False) -> torch.Tensor:
    from .api import matmul

    return matmul(a, b, a_scale, b_scale, out_dtype=out_dtype, batch_invariant=batch_invariant)


@_matmul.register_fake
def _matmul_fake(a, b, a_scale, b_scale, out_dtype="bfloat16", batch_invariant=False):
    sig = _signature(a, b, a_scale, b_scale, None, out_dtype)
    return a.new_empty(sig.out_shape, dtype=_OUT_TORCH[sig.out_dtype])


@torch.library.custom_op("fp8gemm::matmul_out", mutates_args=("out",))
def _matmul_out(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
                out: torch.Tensor, batch_invariant: bool = False) -> None:
    from .api import matmul

    matmul(a, b, a_scale, b_scale, out=out, batch_invariant=batch_invariant)


@_matmul_out.register_fake
def _matmul_out_fake(a, b, a_scale, b_scale, out, batch_invariant=False):
    sig = _signature(a, b, a_scale, b_scale, out, None)
    if tuple(out.shape) != sig.out_shape:
        raise ValueError(f"out must have shape {sig.out_shape}; got {tuple(out.shape)}")


def _grouped_signature(a, b, a_scale, b_scale, groups, out, out_dtype, masked):
    """The eager rules of the grouped GEMMs in their order (validate.check_grouped_signature),
    the devices checked after the kinds as eager does."""
    name = "counts" if masked else "offsets"
    specs = [_spec(a, "a"), _spec(b, "b"), _spec(a_scale, "a_scale"), _spec(b_scale, "b_scale")]
    check_group_layout(specs[0], specs[1], specs[3], _spec(groups, name), masked)
    check_gemm_kinds(*specs)
    _check_device((a, "a"), (b, "b"), (a_scale, "a_scale"), (b_scale, "b_scale"), (groups, name),
                  *(((out, "out"),) if out is not None else ()))
    return check_grouped_signature(*specs, _spec(groups, name), _spec(out, "out") if out is not None else None,
                                   out_dtype, masked)


def _check_out_shape(out, sig):
    if tuple(out.shape) != sig.out_shape:
        raise ValueError(f"out must have shape {sig.out_shape}; got {tuple(out.shape)}")


@torch.library.custom_op("fp8gemm::grouped_matmul_contiguous", mutates_args=())
def _grouped_contiguous(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
                        offsets: torch.Tensor, out_dtype: str = "bfloat16", precise_fp32: bool = True,
                        batch_invariant: bool = False) -> torch.Tensor:
    from .grouped import grouped_matmul_contiguous

    return grouped_matmul_contiguous(a, b, a_scale, b_scale, offsets, out_dtype=out_dtype, precise_fp32=precise_fp32,
                                     batch_invariant=batch_invariant)


@_grouped_contiguous.register_fake
def _grouped_contiguous_fake(a, b, a_scale, b_scale, offsets, out_dtype="bfloat16", precise_fp32=True,
                             batch_invariant=False):
    sig = _grouped_signature(a, b, a_scale, b_scale, offsets, None, out_dtype, False)
    return a.new_empty(sig.out_shape, dtype=_OUT_TORCH[sig.out_dtype])


@torch.library.custom_op("fp8gemm::grouped_matmul_contiguous_out", mutates_args=("out",))
def _grouped_contiguous_out(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
                            offsets: torch.Tensor, out: torch.Tensor, precise_fp32: bool = True,
                            batch_invariant: bool = False) -> None:
    from .grouped import grouped_matmul_contiguous

    grouped_matmul_contiguous(a, b, a_scale, b_scale, offsets, out=out, precise_fp32=precise_fp32,
                              batch_invariant=batch_invariant)


@_grouped_contiguous_out.register_fake
def _grouped_contiguous_out_fake(a, b, a_scale, b_scale, offsets, out, precise_fp32=True, batch_invariant=False):
    _check_out_shape(out, _grouped_signature(a, b, a_scale, b_scale, offsets, out, None, False))


@torch.library.custom_op("fp8gemm::grouped_matmul_masked", mutates_args=())
def _grouped_masked(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
                    counts: torch.Tensor, out_dtype: str = "bfloat16",
                    expected_rows: Optional[int] = None, batch_invariant: bool = False) -> torch.Tensor:
    from .grouped import grouped_matmul_masked

    return grouped_matmul_masked(a, b, a_scale, b_scale, counts, out_dtype=out_dtype, expected_rows=expected_rows,
                                 batch_invariant=batch_invariant)


@_grouped_masked.register_fake
def _grouped_masked_fake(a, b, a_scale, b_scale, counts, out_dtype="bfloat16", expected_rows=None,
                         batch_invariant=False):
    sig = _grouped_signature(a, b, a_scale, b_scale, counts, None, out_dtype, True)
    return a.new_empty(sig.out_shape, dtype=_OUT_TORCH[sig.out_dtype])


@torch.library.custom_op("fp8gemm::grouped_matmul_masked_out", mutates_args=("out",))
def _grouped_masked_out(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
                        counts: torch.Tensor, out: torch.Tensor, expected_rows: Optional[int] = None,
                        batch_invariant: bool = False) -> None:
    from .grouped import grouped_matmul_masked

    grouped_matmul_masked(a, b, a_scale, b_scale, counts, out=out, expected_rows=expected_rows,
                          batch_invariant=batch_invariant)


@_grouped_masked_out.register_fake
def _grouped_masked_out_fake(a, b, a_scale, b_scale, counts, out, expected_rows=None, batch_invariant=False):
    _check_out_shape(out, _grouped_signature(a, b, a_scale, b_scale, counts, out, None, True))


@torch.library.custom_op("fp8gemm::moe", mutates_args=())
def _moe(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, w1: torch.Tensor,
         w1_scale: torch.Tensor, w2: torch.Tensor, w2_scale: torch.Tensor, x_scale: Optional[torch.Tensor] = None,
         limit: Optional[float] = SWIGLU_LIMIT, fused: Optional[bool] = None,
         batch_invariant: bool = False) -> torch.Tensor:
    from .moe_layer import moe

    return moe(x, topk_ids, topk_weights, w1, w1_scale, w2, w2_scale, x_scale=x_scale, limit=limit, fused=fused,
               batch_invariant=batch_invariant)


@_moe.register_fake
def _moe_fake(x, topk_ids, topk_weights, w1, w1_scale, w2, w2_scale, x_scale=None, limit=SWIGLU_LIMIT, fused=None,
              batch_invariant=False):
    from .moe_layer import check_moe_signature, check_unscaled_x

    if x_scale is None:
        # the layer quantizes x first: the quantizer's rule, then x as its FP8 result
        check_unscaled_x(str(x.dtype).replace("torch.", ""))
        _check_quantizer_input(x)
        sx = ArraySpec("x", "float8_e4m3fn", tuple(x.shape))
        sxs = ArraySpec("x_scale", "float32", tuple(x.shape[:-1]) + (-(-x.shape[-1] // GROUP),))
    else:
        sx, sxs = _spec(x, "x"), _spec(x_scale, "x_scale")
    t, hidden = check_moe_signature(sx, sxs, _spec(topk_ids, "topk_ids"), _spec(topk_weights, "topk_weights"),
                                    _spec(w1, "w1"), _spec(w1_scale, "w1_scale"), _spec(w2, "w2"),
                                    _spec(w2_scale, "w2_scale"))
    _check_device((x, "x"), (topk_ids, "topk_ids"), (topk_weights, "topk_weights"), (w1, "w1"),
                  (w1_scale, "w1_scale"), (w2, "w2"), (w2_scale, "w2_scale"),
                  *(((x_scale, "x_scale"),) if x_scale is not None else ()))
    return x.new_empty((t, hidden), dtype=torch.bfloat16)


def _check_quantizer_input(x):
    dt = str(x.dtype).replace("torch.", "")
    if dt not in _IN_TYPES:
        raise TypeError(f"x must be bfloat16, float16 or float32 (got {dt})")
    if x.dim() < 1 or x.shape[-1] < 1:
        raise ValueError(f"x must have a last (K) dimension of at least 1 (shape {tuple(x.shape)})")


@torch.library.custom_op("fp8gemm::quantize_per_token_group", mutates_args=())
def _quantize(x: torch.Tensor, eps: float = 1e-10) -> tuple[torch.Tensor, torch.Tensor]:
    from .quantize import quantize_per_token_group

    return quantize_per_token_group(x, GROUP, eps)


@_quantize.register_fake
def _quantize_fake(x, eps=1e-10):
    _check_quantizer_input(x)
    _check_device((x, "x"))
    groups = -(-x.shape[-1] // GROUP)
    return (x.new_empty(x.shape, dtype=torch.float8_e4m3fn),
            x.new_empty(tuple(x.shape[:-1]) + (groups,), dtype=torch.float32))


def _add_bias(c: torch.Tensor, bias):
    return c if bias is None else c + bias.to(c.dtype)


def matmul(a, b, a_scale, b_scale, *, out_dtype=None, out=None, bias=None, batch_invariant=None):
    """fp8gemm.matmul through the operators (traceable by torch.compile); ``bias`` [N] is added
    to the product in its output dtype (with ``out=``, in place). ``batch_invariant``: as
    fp8gemm.matmul's (None: the process-wide mode, read when the call is made or traced)."""
    invariant = resolve_invariant(batch_invariant)
    if out is not None:
        torch.ops.fp8gemm.matmul_out(a, b, a_scale, b_scale, out, invariant)
        if bias is not None:
            out.add_(bias.to(out.dtype))
        return out
    return _add_bias(torch.ops.fp8gemm.matmul(a, b, a_scale, b_scale, _out_dtype(out_dtype), invariant), bias)


def w8a8_block_fp8_matmul(A, B, As, Bs, block_size, output_dtype=torch.float16, *, bias=None,
                          batch_invariant=None):
    """vLLM's ``w8a8_block_fp8_matmul(A, B, As, Bs, block_size, output_dtype=torch.float16)``, its
    defaults included (block_size required, float16 out): A [..., K] FP8, B [N, K] FP8,
    As [..., K / 128], Bs [N / 128, K / 128]; block_size must be [128, 128]. ``bias`` and
    ``batch_invariant`` (keyword only, as matmul's) are fp8gemm's additions."""
    check_block_size(tuple(block_size) if isinstance(block_size, list) else block_size)
    return matmul(A, B, As, Bs, out_dtype=output_dtype, bias=bias, batch_invariant=batch_invariant)


def fp8_gemm_nt(a, b, d, c=None, bias=None, *, batch_invariant=None):
    """DeepGEMM's ``fp8_gemm_nt((a, sa), (b, sb), d[, c])``: writes ``d`` = a @ b^T, plus ``c``
    when given (DeepGEMM's accumulate form: the sum taken in FP32, rounded once into ``d``), plus
    ``bias``; returns ``d``. The A scales may be in either layout (DeepGEMM's MN-major one
    included). ``batch_invariant`` (keyword only) as matmul's."""
    (a_q, sa), (b_q, sb) = a, b
    if c is None:
        return matmul(a_q, b_q, sa, sb, out=d, bias=bias, batch_invariant=batch_invariant)
    acc = torch.ops.fp8gemm.matmul(a_q, b_q, sa, sb, "float32", resolve_invariant(batch_invariant)) + \
        c.to(torch.float32)
    if bias is not None:
        acc = acc + bias.to(torch.float32)
    d.copy_(acc)
    return d


def grouped_matmul_contiguous(a, b, a_scale, b_scale, offsets, *, out_dtype=None, out=None, precise_fp32=True,
                              batch_invariant=None):
    """fp8gemm.grouped_matmul_contiguous through the operators (``offsets`` a CUDA int32 tensor).
    ``batch_invariant``: as the eager function's (None: the process-wide mode, read when the call
    is made or traced)."""
    invariant = resolve_invariant(batch_invariant)
    if out is not None:
        torch.ops.fp8gemm.grouped_matmul_contiguous_out(a, b, a_scale, b_scale, offsets, out, precise_fp32, invariant)
        return out
    return torch.ops.fp8gemm.grouped_matmul_contiguous(a, b, a_scale, b_scale, offsets, _out_dtype(out_dtype),
                                                       precise_fp32, invariant)


def grouped_matmul_masked(a, b, a_scale, b_scale, counts, *, out_dtype=None, out=None, expected_rows=None,
                          batch_invariant=None):
    """fp8gemm.grouped_matmul_masked through the operators (``counts`` a CUDA int32 tensor).
    ``batch_invariant`` as in grouped_matmul_contiguous."""
    invariant = resolve_invariant(batch_invariant)
    if out is not None:
        torch.ops.fp8gemm.grouped_matmul_masked_out(a, b, a_scale, b_scale, counts, out, expected_rows, invariant)
        return out
    return torch.ops.fp8gemm.grouped_matmul_masked(a, b, a_scale, b_scale, counts, _out_dtype(out_dtype),
                                                   expected_rows, invariant)


def moe(x, topk_ids, topk_weights, w1, w1_scale, w2, w2_scale, *, x_scale=None, limit=SWIGLU_LIMIT, fused=None,
        batch_invariant=None):
    """fp8gemm.moe through the operator. ``batch_invariant`` as fp8gemm.moe's (None: the
    process-wide mode, read when the call is made or traced)."""
    return torch.ops.fp8gemm.moe(x, topk_ids, topk_weights, w1, w1_scale, w2, w2_scale, x_scale,
                                 None if limit is None else float(limit), fused, resolve_invariant(batch_invariant))


def _out_dtype(out_dtype) -> str:
    return normalize_out_dtype("bfloat16" if out_dtype is None else str(out_dtype).replace("torch.", ""))


def offsets_from_m_indices(m_indices: torch.Tensor, num_groups: int) -> torch.Tensor:
    """DeepGEMM's contiguous layout (``m_indices`` [P] int32: each row's group, the groups in
    increasing order along the rows, -1 on the padding rows that align each group's rows) ->
    offsets [G + 1] int32 on the same device, with no host sync: group g spans from its first row to the next group's first row, so a group's padding
    rows fall inside its own span (they are computed with its weights; DeepGEMM leaves them
    unspecified too) and a group with no rows gets an empty span."""
    p = m_indices.shape[0]
    rows = torch.arange(p, device=m_indices.device, dtype=torch.int64)
    idx = torch.where(m_indices >= 0, m_indices.to(torch.int64), torch.full_like(rows, num_groups))
    first = torch.full((num_groups + 1,), p, dtype=torch.int64, device=m_indices.device)
    first = first.scatter_reduce(0, idx, rows, reduce="amin")
    first[num_groups] = p
    # empty groups: the next group's start (a suffix minimum keeps the offsets nondecreasing)
    first = torch.flip(torch.cummin(torch.flip(first, (0,)), 0).values, (0,))
    first[0] = 0                                      # leading padding rows join group 0
    return first.to(torch.int32)


def m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices):
    """DeepGEMM's ``m_grouped_fp8_gemm_nt_contiguous((a, sa), (b, sb), d, m_indices)``: a [P, K]
    with each group's rows contiguous (``m_indices`` [P], -1 on padding rows), b [G, N, K];
    writes d [P, N] (bf16) and returns it. The A scales may be in either layout."""
    (a_q, sa), (b_q, sb) = a, b
    offsets = offsets_from_m_indices(m_indices, b_q.shape[0])
    return grouped_matmul_contiguous(a_q, b_q, sa, sb, offsets, out=d)


def m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, expected_m: int):
    """DeepGEMM's ``m_grouped_fp8_gemm_nt_masked((a, sa), (b, sb), d, masked_m, expected_m)``:
    a [G, max_m, K], masked_m [G] int32 rows per group, ``expected_m`` about how many rows a group
    holds; writes d [G, max_m, N] and returns it."""
    (a_q, sa), (b_q, sb) = a, b
    return grouped_matmul_masked(a_q, b_q, sa, sb, masked_m, out=d, expected_rows=int(expected_m) * b_q.shape[0])
