"""The plan stage shared by every entry point: one cache of validated problems and launch plans,
the key that identifies a call, and the last stage (output, launch, hand back).

matmul, the grouped GEMMs, the fused MoE L1, the JAX handler and the MoE layer's glue kernels all
keep their plans in ``PLANS``; each key starts with its entry point's tag (the first element), so
that no two entry points share an entry. A full cache is cleared, not evicted entry by entry: a
serving loop calls few signatures, and clearing keeps the lookup a plain dict get.
"""
from __future__ import annotations

from . import output
from .intake import CUPY, JAX, TORCH

MAX_PLANS = 4096
PLANS = {}     # (tag, input signature ...) -> what the entry point needs to launch again


def remember(key, entry) -> None:
    """Keep ``entry`` under ``key``, clearing the cache first when it is full."""
    if len(PLANS) >= MAX_PLANS:
        PLANS.clear()
    PLANS[key] = entry




def plan_key(tag, framework, out_dtype, *arrays):
    """What identifies a call for the plan cache: the entry point's tag, the output dtype and, per
    array, its pointer, shape, strides and dtype (pointers are unique across GPUs under unified
    addressing). None when an array is not a CuPy / torch array of the caller's framework, or
    out_dtype is unhashable."""
    if out_dtype is not None and type(out_dtype) is not str:
        try:
            hash(out_dtype)
        except TypeError:          # an unhashable out_dtype: no caching, the slow path checks it
            return None
    key = [tag, framework, out_dtype]
    if framework == CUPY:
        cls = _array_types.get(CUPY) or _array_type(CUPY)
        for x in arrays:
            if type(x) is not cls:
                return None
            key += (x.data.ptr, x.shape, x.strides, x.dtype)
    elif framework == TORCH:
        cls = _array_types.get(TORCH) or _array_type(TORCH)
        for x in arrays:
            if not isinstance(x, cls):
                return None
            key += (x.data_ptr(), x.shape, x.stride(), x.dtype)
    else:
        return None
    return tuple(key)


_array_types = {}
cupy_ndarray = None      # cupy.ndarray once a CuPy caller has been seen (the fast path's check)


def _array_type(framework):
    if framework == CUPY:
        import cupy

        global cupy_ndarray
        _array_types[CUPY] = cupy_ndarray = cupy.ndarray
    else:
        import torch

        _array_types[TORCH] = torch.Tensor
    return _array_types[framework]


def execute(framework, stream_for, problem, runner, tout, out):
    """Allocate (or take) the output, launch on the caller's stream, hand the result back."""
    stream_ptr = stream_for(problem.device)
    if tout is None:
        result, out_ptr = output.allocate(framework, problem.out_shape, problem.out_dtype,
                                          problem.device)
    else:
        result, out_ptr = out, tout.ptr
    if runner is not None:
        runner.run(out_ptr, stream_ptr)
    if tout is not None:
        return out
    if framework != JAX:
        return result
    return output.finish(framework, result, problem.out_shape, problem.out_dtype, problem.device,
                         stream_ptr)
