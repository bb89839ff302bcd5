"""The quantizers: activations x [..., K] -> (FP8 E4M3 codes [..., K], fp32 scales
[..., ceil(K/128)]) per 1 x 128 group, and weights w [..., N, K] -> (codes [..., N, K], scales
[..., ceil(N/128), ceil(K/128)]) per 128 x 128 block.

GPU arrays (CuPy, PyTorch, JAX) run kernels_cu/quantize_per_token_group.cu or
quantize_per_block.cu on the caller's stream and come back in the caller's framework
(torch.float8_e4m3fn, JAX float8_e4m3fn, CuPy uint8 bytes); NumPy arrays run the host quantizers
(fp8gemm/host_quant.py). Both compute the same values bit for bit (tested), and the scales come
out row-major, the layout the GEMMs read in place, or for activations, on request, M-major with
16-byte aligned columns (``m_major_scales=True``: the layout DeepGEMM takes, and the one the GEMM
kernels can fetch by TMA per K block).
"""
from __future__ import annotations

import math
from dataclasses import replace

from . import compiler, driver, host_quant, output
from .intake import CUPY, JAX, TORCH, framework_of, intake
from .launcher import KernelParams, launch
from .dtypes import KERNEL_TYPE_IDS
from .host_quant import MIN_EPS, check_eps as _check_eps  # noqa: F401 - one eps rule, host and GPU
from .validate import collapse_rows

GROUP = 128
THREADS = 256
VECTOR_LOADS = 1                 # the vector path's warp takes 4 * this many groups (lab/quant_exp.py:
                                 # 1 and 2 within 3% of each other, 0.93-0.99 of a same-bytes stream)
_IN_TYPES = KERNEL_TYPE_IDS        # the input's type id: kernels_cu/common/types.cuh OutType
_VARIANT = "quantize_per_token_group"
_BLOCK_VARIANT = "quantize_per_block"
MAX_GRID_YZ = 65535


def _gpu_input(x, name: str, framework: str, stream_for):
    if framework == TORCH and x.device.type != "cuda":
        raise ValueError(f"{name} is a torch tensor on {x.device}; pass a CUDA tensor (or a NumPy array for the host "
                         f"quantizer)")
    t = intake(x, name, stream_for)
    if t.device is None:
        raise ValueError(f"{name} is on the CPU; pass a CUDA array (or a NumPy array for the host quantizer)")
    if t.dtype not in _IN_TYPES:
        raise TypeError(f"{name} must be bfloat16, float16 or float32 (got {t.dtype})")
    return t


def m_major_ld(rows: int) -> int:
    """The column stride (elements) of M-major scales for ``rows`` rows: a multiple of 4, so that
    every column starts 16-byte aligned (what a TMA map needs), at least 4."""
    return max(4, -(-rows // 4) * 4)


def m_major_strides(s_shape: tuple, ld: int) -> tuple:
    """Element strides of scales ``s_shape`` = [..., G] stored M-major: the leading dimensions as
    one row index of unit stride, the group index ``ld`` apart."""
    strides, step = [], 1
    for d in reversed(s_shape[:-1]):
        strides.append(step)
        step *= d
    return tuple(reversed(strides)) + (ld,)


def _m_major_view(framework: str, buf, s_shape: tuple, ld: int):
    """The [G, ld] buffer ``buf`` seen as scales [..., G] (m_major_strides)."""
    strides = m_major_strides(s_shape, ld)
    if framework == TORCH:
        import torch

        return torch.as_strided(buf, s_shape, strides)
    from cupy.lib.stride_tricks import as_strided

    return as_strided(buf, s_shape, tuple(4 * st for st in strides))


def _quantized(framework, stream_for, t, s_shape, launch_fn, eps, m_major: bool = False):
    """Codes shaped like ``t`` and scales ``s_shape`` in the caller's framework, written by
    ``launch_fn`` (launch_per_token_group / launch_per_block) on the caller's stream; ``m_major``:
    the scales M-major (m_major_ld)."""
    q_shape = tuple(t.shape)
    q, q_ptr = output.allocate(framework, q_shape, "float8_e4m3fn", t.device)
    ld = m_major_ld(math.prod(s_shape[:-1])) if m_major else 0
    s, s_ptr = output.allocate(framework, (s_shape[-1], ld) if m_major else s_shape, "float32", t.device)
    stream = stream_for(t.device)
    if m_major:
        launch_fn(t, q_ptr, s_ptr, stream, eps, ld)
        return q, _m_major_view(framework, s, s_shape, ld)
    launch_fn(t, q_ptr, s_ptr, stream, eps)
    if framework == JAX:
        import jax.numpy as jnp

        # NOTES: handed over as bytes and bit-cast: every DLPack importer takes uint8.
        return (output.finish(JAX, q, q_shape, "uint8", t.device, stream).view(jnp.float8_e4m3fn),
                output.finish(JAX, s, s_shape, "float32", t.device, stream))
    return q, s


def quantize_per_token_group(x, group_size: int = GROUP, eps: float = 1e-10, *, m_major_scales: bool = False):
    """Quantize activations per 1 x 128 group: ``scale = max(amax, eps) / 448``, ``q = x / scale``
    rounded to the nearest E4M3 value.

    x: [..., K] bfloat16 / float16 / float32, K-contiguous, on a GPU (CuPy, PyTorch, JAX); or a
    NumPy array (host reference, any group_size). Returns (q, scale) with q [..., K] and
    scale [..., ceil(K / 128)], ready for fp8gemm.matmul's ``a`` and ``a_scale``.
    m_major_scales: scale is a strided view, M-major: the rows (every leading index) of one group
    are contiguous and each group's column starts 16-byte aligned (DeepGEMM's A-scale layout).
    The values are the same; CuPy, PyTorch and NumPy (JAX arrays carry no strides).
    """
    if not isinstance(m_major_scales, bool):
        raise TypeError(f"m_major_scales must be True or False (got {m_major_scales!r})")
    framework = framework_of(x)
    if framework not in (CUPY, TORCH, JAX) and (hasattr(x, "__array_interface__") or isinstance(x, (list, tuple))):
        q, s = host_quant.quantize_per_token_group(x, group_size, eps)     # NumPy and friends: host
        return (q, host_m_major(s)) if m_major_scales else (q, s)
    if m_major_scales and framework == JAX:
        raise ValueError("m_major_scales=True takes CuPy, PyTorch or NumPy arrays: JAX arrays carry no strides "
                         "(fp8gemm.jax.matmul reads the row-major scales)")
    if group_size != GROUP:
        raise ValueError(f"group_size must be {GROUP} on the GPU (got {group_size!r})")
    _check_eps(eps)
    stream_for = output.stream_for_framework(framework)
    t = _gpu_input(x, "x", framework, stream_for)
    if t.ndim < 1 or t.shape[-1] < 1:
        raise ValueError(f"x must have a last (K) dimension of at least 1 (shape {t.shape})")
    s_shape = tuple(t.shape[:-1]) + (-(-t.shape[-1] // GROUP),)
    return _quantized(framework, stream_for, t, s_shape, launch_per_token_group, eps, m_major_scales)


def host_m_major(s):
    """Host scales [..., G] (NumPy) copied into the M-major layout of the GPU path (m_major_ld)."""
    import numpy as np

    rows = math.prod(s.shape[:-1])
    ld = m_major_ld(rows)
    buf = np.zeros((s.shape[-1], ld), dtype=np.float32)
    buf[:, :rows] = s.reshape(rows, s.shape[-1]).T
    return np.lib.stride_tricks.as_strided(buf, s.shape, tuple(4 * st for st in m_major_strides(s.shape, ld)))


def launch_per_token_group(t, q_ptr: int, s_ptr: int, stream: int, eps: float, scale_ld: int = 0) -> None:
    """The activation quantizer's layout rules and launch for a checked intake Tensor ``t``,
    into a compact q [..., K] buffer and a scale [..., ceil(K/128)] one (the eager call's, or
    XLA's): compact row-major, or M-major with column stride ``scale_ld`` (> 0)."""
    k = t.shape[-1]
    rows = math.prod(t.shape[:-1])
    if rows == 0:            # an empty array's strides mean nothing (CuPy reports zeros)
        return
    if t.strides[-1] != 1 and k > 1:
        raise ValueError(f"x must be contiguous along its last dimension (strides {t.strides})")
    ldx = collapse_rows(t, "pass a contiguous array") or k
    groups = -(-k // GROUP)
    vector = k % GROUP == 0 and t.ptr % 16 == 0 and ldx % 8 == 0
    # kernels_cu/quantize_per_token_group.cu: the vector path takes 4 * loads groups per warp,
    # the element path 1.
    loads = VECTOR_LOADS if vector else 0
    warps = -(-rows * groups // (4 * loads)) if loads else rows * groups
    blocks = -(-warps * 32 // THREADS)
    if blocks > 2**31 - 1:
        raise ValueError(f"x has too many rows x groups ({rows * groups}) for one launch")
    kern = compiler.get_kernel(t.device, _VARIANT, (_IN_TYPES[t.dtype], loads), 0)
    params = KernelParams((("u64", t.ptr), ("i64", ldx), ("u64", q_ptr), ("u64", s_ptr),
                           ("u32", rows), ("u32", k), ("f32", eps), ("u32", scale_ld)))
    launch(t.device, driver.launch_args(kern.kernel.ptr, blocks, THREADS, 0), stream, params.address)


def quantize_per_block(w, block=(GROUP, GROUP), eps: float = 1e-10):
    """Quantize weights per 128 x 128 block: ``scale = max(amax, eps) / 448``, ``q = w / scale``
    rounded to the nearest E4M3 value (clipped to +-448), bit for bit reference.quantize_per_block.

    w: [..., N, K] bfloat16 / float16 / float32 on a GPU (CuPy, PyTorch, JAX), K-contiguous (a
    batch of matrices, e.g. an MoE layer's experts [E, N, K], is one launch); or a NumPy array
    (the host quantizers, any ``block``). Returns (q [..., N, K], scale [..., ceil(N/128),
    ceil(K/128)]), ready for the GEMMs' ``b`` and ``b_scale``.
    """
    framework = framework_of(w)
    if framework not in (CUPY, TORCH, JAX) and (hasattr(w, "__array_interface__") or isinstance(w, (list, tuple))):
        return host_quant.quantize_per_block(w, block, eps)                # NumPy and friends: host
    if tuple(block) != (GROUP, GROUP):
        raise ValueError(f"block must be ({GROUP}, {GROUP}) on the GPU (got {block!r})")
    _check_eps(eps)
    stream_for = output.stream_for_framework(framework)
    t = _gpu_input(w, "w", framework, stream_for)
    if t.ndim < 2:
        raise ValueError(f"w must be [..., N, K] (at least 2 dimensions); got shape {t.shape}")
    n, k = t.shape[-2:]
    s_shape = tuple(t.shape[:-2]) + (-(-n // GROUP), -(-k // GROUP))
    return _quantized(framework, stream_for, t, s_shape, launch_per_block, eps)


def launch_per_block(t, q_ptr: int, s_ptr: int, stream: int, eps: float) -> None:
    """The weight quantizer's layout rules and launch for a checked intake Tensor ``t`` [..., N,
    K], into compact q [..., N, K] and scale [..., ceil(N/128), ceil(K/128)] buffers."""
    n, k = t.shape[-2:]
    batch = math.prod(t.shape[:-2])
    if batch * n * k == 0:   # an empty array's strides mean nothing (CuPy reports zeros)
        return
    nb, kb = -(-n // GROUP), -(-k // GROUP)
    if k > 1 and t.strides[-1] != 1:
        raise ValueError(f"w must be contiguous along its last dimension (strides {t.strides})")
    ldw = t.strides[-2] if n > 1 else k
    # the stride between matrices: the leading dimensions flattened into one
    lead = collapse_rows(replace(t, shape=t.shape[:-2] + (n * k,), strides=t.strides[:-2] + (1,)),
                         "pass a contiguous w") if batch > 1 else 0
    if nb > MAX_GRID_YZ or batch > MAX_GRID_YZ:
        raise ValueError(f"w has too many 128-row blocks ({nb}) or matrices ({batch}) for one launch "
                         f"(at most {MAX_GRID_YZ} each)")
    # Vector loads and 4-byte code stores when every row of every matrix starts 4 elements aligned
    # (q is compact and its buffer 256-byte aligned: K % 4 == 0 aligns its rows too).
    elem = 4 if t.dtype == "float32" else 2
    vec = k % 4 == 0 and (ldw % 4 == 0 or n == 1) and lead % 4 == 0 and t.ptr % (4 * elem) == 0
    kern = compiler.get_kernel(t.device, _BLOCK_VARIANT, (_IN_TYPES[t.dtype], "true" if vec else "false"), 0)
    params = KernelParams((("u64", t.ptr), ("i64", ldw), ("i64", lead), ("u64", q_ptr), ("u64", s_ptr),
                           ("u32", n), ("u32", k), ("f32", eps)))
    launch(t.device, (kern.kernel.ptr, kb, nb, batch, THREADS, 1, 1, 0), stream, params.address)
