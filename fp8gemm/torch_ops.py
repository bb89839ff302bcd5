"""fp8gemm as PyTorch operators: ``torch.ops.fp8gemm.*``, for torch.compile and CUDA graphs.

``import fp8gemm.torch_ops`` registers, once per process:

  fp8gemm::matmul(a, b, a_scale, b_scale, out_dtype="bfloat16") -> Tensor
  fp8gemm::matmul_out(a, b, a_scale, b_scale, out) -> ()            (writes ``out``)
  fp8gemm::quantize_per_token_group(x, eps=1e-10) -> (q, scale)

Each is a ``torch.library.custom_op`` whose real kernel is fp8gemm's (``fp8gemm.matmul``,
``fp8gemm.quantize_per_token_group``, on the current stream) and whose fake kernel applies the
same kind and shape rules, with the same messages, to fake or meta tensors and returns outputs of
the right shape and dtype. So ``torch.compile(fullgraph=True)`` traces a model that calls them
into one graph with no break in our Python, and the rules hold at trace time.

The wrappers below call the operators with the eager API's argument forms: ``matmul`` as
fp8gemm.matmul (``out=`` included), ``w8a8_block_fp8_matmul`` in vLLM's argument order,
``fp8_gemm_nt`` in DeepGEMM's, each with an optional ``bias`` added to the product.
"""
from __future__ import annotations

import torch

from .validate import (ArraySpec, check_block_size, check_gemm_kinds, check_gemm_shapes, normalize_out_dtype,
                       on_cpu_message)

_OUT_TORCH = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
_IN_TYPES = ("bfloat16", "float16", "float32")
GROUP = 128


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
            out_dtype: str = "bfloat16") -> torch.Tensor:
    from .api import matmul

    return matmul(a, b, a_scale, b_scale, out_dtype=out_dtype)


@_matmul.register_fake
def _matmul_fake(a, b, a_scale, b_scale, out_dtype="bfloat16"):
    sig = _signature(a, b, a_scale, b_scale, None, out_dtype)
    return a.new_empty(sig.out_shape, dtype=_OUT_TORCH[sig.out_dtype])


@torch.library.custom_op("fp8gemm::matmul_out", mutates_args=("out",))
def _matmul_out(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
                out: torch.Tensor) -> None:
    from .api import matmul

    matmul(a, b, a_scale, b_scale, out=out)


@_matmul_out.register_fake
def _matmul_out_fake(a, b, a_scale, b_scale, out):
    sig = _signature(a, b, a_scale, b_scale, out, None)
    if tuple(out.shape) != sig.out_shape:
        raise ValueError(f"out must have shape {sig.out_shape}; got {tuple(out.shape)}")


@torch.library.custom_op("fp8gemm::quantize_per_token_group", mutates_args=())
def _quantize(x: torch.Tensor, eps: float = 1e-10) -> tuple[torch.Tensor, torch.Tensor]:
    from .quantize import quantize_per_token_group

    return quantize_per_token_group(x, GROUP, eps)


@_quantize.register_fake
def _quantize_fake(x, eps=1e-10):
    dt = str(x.dtype).replace("torch.", "")
    if dt not in _IN_TYPES:
        raise TypeError(f"x must be bfloat16, float16 or float32 (got {dt})")
    if x.dim() < 1 or x.shape[-1] < 1:
        raise ValueError(f"x must have a last (K) dimension of at least 1 (shape {tuple(x.shape)})")
    _check_device((x, "x"))
    groups = -(-x.shape[-1] // GROUP)
    return (x.new_empty(x.shape, dtype=torch.float8_e4m3fn),
            x.new_empty(tuple(x.shape[:-1]) + (groups,), dtype=torch.float32))


def _add_bias(c: torch.Tensor, bias):
    return c if bias is None else c + bias.to(c.dtype)


def matmul(a, b, a_scale, b_scale, *, out_dtype=None, out=None, bias=None):
    """fp8gemm.matmul through the operators (traceable by torch.compile); ``bias`` [N] is added
    to the product in its output dtype (with ``out=``, in place)."""
    if out is not None:
        torch.ops.fp8gemm.matmul_out(a, b, a_scale, b_scale, out)
        if bias is not None:
            out.add_(bias.to(out.dtype))
        return out
    dt = normalize_out_dtype("bfloat16" if out_dtype is None else
                             str(out_dtype).replace("torch.", ""))
    return _add_bias(torch.ops.fp8gemm.matmul(a, b, a_scale, b_scale, dt), bias)


def w8a8_block_fp8_matmul(A, B, As, Bs, block_size=(128, 128), output_dtype=torch.bfloat16, bias=None):
    """vLLM's ``w8a8_block_fp8_matmul(A, B, As, Bs, block_size, output_dtype)``: A [..., K] FP8,
    B [N, K] FP8, As [..., K / 128], Bs [N / 128, K / 128]; block_size must be [128, 128]."""
    check_block_size(tuple(block_size) if isinstance(block_size, list) else block_size)
    return matmul(A, B, As, Bs, out_dtype=output_dtype, bias=bias)


def fp8_gemm_nt(a, b, d, c=None, bias=None):
    """DeepGEMM's ``fp8_gemm_nt((a, sa), (b, sb), d[, c])``: writes ``d`` = a @ b^T, plus ``c``
    when given (DeepGEMM's accumulate form: the sum taken in FP32, rounded once into ``d``), plus
    ``bias``; returns ``d``. The A scales may be in either layout (DeepGEMM's MN-major one
    included)."""
    (a_q, sa), (b_q, sb) = a, b
    if c is None:
        return matmul(a_q, b_q, sa, sb, out=d, bias=bias)
    acc = torch.ops.fp8gemm.matmul(a_q, b_q, sa, sb, "float32") + c.to(torch.float32)
    if bias is not None:
        acc = acc + bias.to(torch.float32)
    d.copy_(acc)
    return d
