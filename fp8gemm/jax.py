"""fp8gemm inside ``jax.jit``: ``fp8gemm.jax.matmul`` as an XLA FFI custom call.

    import fp8gemm.jax
    c = jax.jit(fp8gemm.jax.matmul)(a, b, a_scale, b_scale)          # a, b float8_e4m3fn

The call lowers to the FFI target ``fp8gemm_matmul`` (platform CUDA), whose handler is Python
(fp8gemm/xla_ffi.py, ctypes; no C++ build): it reads XLA's buffers and stream, validates the
problem, plans the launch once per buffer signature and launches on XLA's stream. It is declared
safe for XLA's command buffers (CUDA graphs). ``vmap`` runs the batch sequentially. Eager JAX
arrays also work with ``fp8gemm.matmul`` (DLPack, no jit).

STATUS: the FFI plumbing (metadata, stages, buffers, errors) is tested on the CPU platform
(tests/test_xla_ffi.py); the CUDA target awaits its GPU tests (tests/test_jax_ffi_gpu.py).
"""
from __future__ import annotations

import threading

from . import xla_ffi
from .api import plan_problem
from .intake import Tensor
from .plans import PLANS, remember
from .validate import ArraySpec, check_gemm_kinds, check_gemm_shapes, validate_gemm

TARGET = "fp8gemm_matmul"
_lock = threading.Lock()


def _tensor(name: str, buf: xla_ffi.FfiBuffer, device: int) -> Tensor:
    """XLA buffers are dense row-major."""
    strides, step = [], 1
    for d in reversed(buf.shape):
        strides.append(step)
        step *= max(d, 1)
    return Tensor(name, buf.ptr, buf.dtype, buf.shape, tuple(reversed(strides)), device, "xla",
                  name != "out", None)


def _execute(call: xla_ffi.Call) -> None:
    if len(call.args) != 4 or len(call.rets) != 1:
        raise ValueError(f"{TARGET} takes 4 arguments and 1 result; got {len(call.args)} and {len(call.rets)}")
    device = call.device()
    bufs = (*call.args, call.rets[0])
    key = ("jax", device) + tuple((x.ptr, x.dtype, x.shape) for x in bufs)   # -> (problem, plan or None)
    entry = PLANS.get(key)
    if entry is None:
        a, b, sa, sb = (_tensor(nm, x, device) for nm, x in zip(("a", "b", "a_scale", "b_scale"), call.args))
        out = _tensor("out", call.rets[0], device)
        problem = validate_gemm(a, b, sa, sb, out, None)
        entry = (problem, plan_problem(problem, None, problem.n, out.ptr % 16 == 0))
        with _lock:
            remember(key, entry)
    runner = entry[1]
    if runner is not None:
        runner.run(call.rets[0].ptr, call.stream())


def _dtype_name(x) -> str:
    """A JAX value's dtype as fp8gemm names it (float8_e4m3fn, bfloat16, uint8, ...)."""
    dt = getattr(x, "dtype", None)
    return "none" if dt is None else str(dt)


def register() -> None:
    """Register the CUDA FFI target (idempotent; matmul does it on first use)."""
    xla_ffi.register(TARGET, _execute, "CUDA", command_buffer_compatible=True)


def matmul(a, b, a_scale, b_scale, *, out_dtype="bfloat16"):
    """``C = (a * a_scale) @ (b * b_scale).T`` for JAX arrays, traceable under ``jax.jit``.

    Same rules as ``fp8gemm.matmul`` (a [..., K] and b [N, K] float8_e4m3fn or uint8/int8 bytes,
    a_scale [..., ceil(K/128)] and b_scale [ceil(N/128), ceil(K/128)] float32); returns
    [..., N] in ``out_dtype``. Kinds and shapes are checked at trace time (jit, eval_shape) by
    the eager rules, with their messages; pointers and devices at run time.
    """
    import jax
    import jax.numpy as jnp

    register()
    specs = [ArraySpec(name, _dtype_name(x), tuple(getattr(x, "shape", ())))
             for name, x in (("a", a), ("b", b), ("a_scale", a_scale), ("b_scale", b_scale))]
    check_gemm_kinds(*specs)
    sig = check_gemm_shapes(*specs, None, out_dtype)
    result = jax.ShapeDtypeStruct(sig.out_shape, jnp.dtype(sig.out_dtype))
    return jax.ffi.ffi_call(TARGET, result, vmap_method="sequential")(a, b, a_scale, b_scale)


def sharded_matmul(a, b, a_scale, b_scale, *, mesh, tokens=None, weights=None, out_dtype="bfloat16"):
    """fp8gemm.jax.matmul per shard under ``jax.jit`` (jax.shard_map): the tokens (M) split over
    mesh axis ``tokens`` and the weight rows (N) over mesh axis ``weights`` (either may be None),
    K whole on every device, so that each device runs the GEMM of its own rows and columns with
    no all-gather of A, B or their scales. a [M, K] with a_scale [M, ceil(K/128)]; b [N, K] with
    b_scale [ceil(N/128), ceil(K/128)]; returns [M, N] sharded (tokens, weights). Each weight
    shard must hold whole 128-row scale blocks (N / shards a multiple of 128), and M must divide
    by the token shards."""
    import jax
    from jax.sharding import PartitionSpec as P

    def size(axis):
        return 1 if axis is None else mesh.shape[axis]

    if len(getattr(a, "shape", ())) != 2:
        raise ValueError(f"a must have shape [M, K] for sharded_matmul; got {getattr(a, 'shape', None)}")
    m, n = a.shape[0], b.shape[0]
    if m % size(tokens):
        raise ValueError(f"M = {m} must divide by the {size(tokens)} token shards of mesh axis {tokens!r}")
    if n % (128 * size(weights)):
        raise ValueError(f"N = {n} must be a multiple of 128 x the {size(weights)} weight shards of mesh axis "
                         f"{weights!r}: each shard needs whole 128-row blocks of b_scale")
    f = jax.shard_map(lambda a_, b_, sa_, sb_: matmul(a_, b_, sa_, sb_, out_dtype=out_dtype), mesh=mesh,
                      in_specs=(P(tokens, None), P(weights, None), P(tokens, None), P(weights, None)),
                      out_specs=P(tokens, weights), check_vma=False)
    return f(a, b, a_scale, b_scale)
