"""fp8gemm inside ``jax.jit``: the GEMM, the grouped GEMMs and the quantizers as XLA FFI custom
calls.

    import fp8gemm.jax
    c = jax.jit(fp8gemm.jax.matmul)(a, b, a_scale, b_scale)          # a, b float8_e4m3fn
    y = fp8gemm.jax.grouped_matmul_contiguous(a, b, a_scale, b_scale, offsets)
    q, s = fp8gemm.jax.quantize_per_token_group(x)                 # q float8_e4m3fn

Each call lowers to an FFI target (platform CUDA: ``fp8gemm_matmul``, ``fp8gemm_grouped_contiguous``,
``fp8gemm_grouped_masked``, each with a ``_batch_invariant`` twin for the mode,
``fp8gemm_quantize_per_token_group``, ``fp8gemm_quantize_per_block``)
whose handler is Python (fp8gemm/xla_ffi.py, ctypes; no C++ build): it reads XLA's buffers and
stream, validates the problem, plans the launch once per buffer signature (the GEMMs) and launches
on XLA's stream. Each is declared safe for XLA's command buffers (CUDA graphs). ``vmap`` of
matmul over the activations alone folds the batch into M (one launch); other batches run member
by member. Eager JAX arrays also work with the eager API (DLPack, no jit). The grouped
GEMMs take their offsets / counts as device arrays (read by the kernel: nothing waits for the
host); the contiguous form leaves rows outside offsets[0] .. offsets[G] unspecified, as eager
does; the masked form plans for max_rows per group (eager's ``expected_rows`` hint is not taken
under jit). The quantizers use eps = 1e-10. ``fp8gemm.jax.moe`` runs the eager MoE layer on CuPy
views of XLA's buffers (target ``fp8gemm_moe_<clamp>``, ``fp8gemm_moe_<clamp>_batch_invariant`` in
the mode). The GEMMs' and moe's ``batch_invariant`` is the eager functions' (None: the
process-wide mode when the function is traced); the mode has its own targets and plan keys, so
that a plan of one mode never serves the other's calls.

STATUS: the FFI plumbing (metadata, stages, buffers, errors) is tested on the CPU platform
(tests/test_xla_ffi.py); the CUDA target awaits its GPU tests (tests/test_jax_ffi_gpu.py).
"""
from __future__ import annotations

import functools
import threading

from . import xla_ffi
from .api import plan_problem
from .dispatch.invariant import resolve as resolve_invariant
from .intake import Tensor
from .plans import PLANS, remember
from .validate import ArraySpec, check_gemm_kinds, check_gemm_shapes, check_grouped_signature, normalize_out_dtype, \
    validate_gemm, validate_grouped

TARGET = "fp8gemm_matmul"
MATMUL_TARGETS = {False: TARGET, True: "fp8gemm_matmul_batch_invariant"}   # by batch-invariant mode
GROUPED_TARGETS = {False: "fp8gemm_grouped_contiguous", True: "fp8gemm_grouped_masked"}   # by masked
GROUPED_INVARIANT_TARGETS = {masked: f"{t}_batch_invariant" for masked, t in GROUPED_TARGETS.items()}
QUANT_TARGETS = {"token": "fp8gemm_quantize_per_token_group", "block": "fp8gemm_quantize_per_block"}
EPS = 1e-10
_QUANT_IN = ("bfloat16", "float16", "float32")
_lock = threading.Lock()


def _tensor(name: str, buf: xla_ffi.FfiBuffer, device: int) -> Tensor:
    """XLA buffers are dense row-major."""
    strides, step = [], 1
    for d in reversed(buf.shape):
        strides.append(step)
        step *= max(d, 1)
    return Tensor(name, buf.ptr, buf.dtype, buf.shape, tuple(reversed(strides)), device, "xla",
                  name != "out", None)


def _run_planned(call: xla_ffi.Call, target: str, names: tuple, tag: tuple, plan) -> None:
    """The GEMM handlers' common path: check the arity, plan once per buffer signature
    (``plan(inputs, out)`` -> a launch plan, or None for an empty problem) and launch on XLA's
    stream."""
    if len(call.args) != len(names) or len(call.rets) != 1:
        raise ValueError(f"{target} takes {len(names)} arguments and 1 result; got {len(call.args)} and "
                         f"{len(call.rets)}")
    device = call.device()
    bufs = (*call.args, call.rets[0])
    key = tag + (device,) + tuple((x.ptr, x.dtype, x.shape) for x in bufs)   # -> (plan or None,)
    entry = PLANS.get(key)
    if entry is None:
        inputs = [_tensor(nm, x, device) for nm, x in zip(names, call.args)]
        entry = (plan(inputs, _tensor("out", call.rets[0], device)),)
        with _lock:
            remember(key, entry)
    if entry[0] is not None:
        entry[0].run(call.rets[0].ptr, call.stream())


def _execute(call: xla_ffi.Call, batch_invariant: bool = False) -> None:
    def plan(inputs, out):
        problem = validate_gemm(*inputs, out, None)
        return plan_problem(problem, None, problem.n, out.ptr % 16 == 0, batch_invariant)
    _run_planned(call, MATMUL_TARGETS[batch_invariant], ("a", "b", "a_scale", "b_scale"),
                 ("jax", batch_invariant), plan)


def grouped_target(masked: bool, batch_invariant: bool = False) -> str:
    """The FFI target of a grouped GEMM layout in one mode."""
    return (GROUPED_INVARIANT_TARGETS if batch_invariant else GROUPED_TARGETS)[masked]


def _execute_grouped(call: xla_ffi.Call, masked: bool, batch_invariant: bool = False) -> None:
    from .grouped import plan_grouped_problem

    def plan(inputs, out):
        gp = validate_grouped(*inputs, out, None, masked)
        return (plan_grouped_problem(gp, None, True, None, gp.gemm.n, out.ptr % 16 == 0, None, batch_invariant)
                if gp.gemm.m > 0 else None)
    names = ("a", "b", "a_scale", "b_scale", "counts" if masked else "offsets")
    _run_planned(call, grouped_target(masked, batch_invariant), names, ("jax-grouped", masked, batch_invariant),
                 plan)


def _execute_quant(call: xla_ffi.Call, kind: str) -> None:
    from .quantize import launch_per_block, launch_per_token_group
    target = QUANT_TARGETS[kind]
    if len(call.args) != 1 or len(call.rets) != 2:
        raise ValueError(f"{target} takes 1 argument and 2 results; got {len(call.args)} and {len(call.rets)}")
    x = _tensor("x" if kind == "token" else "w", call.args[0], call.device())
    if x.dtype not in _QUANT_IN:
        raise TypeError(f"{x.name} must be bfloat16, float16 or float32 (got {x.dtype})")
    launch = launch_per_token_group if kind == "token" else launch_per_block
    launch(x, call.rets[0].ptr, call.rets[1].ptr, call.stream(), EPS)


_CUPY_VIEW_DTYPES = {"float8_e4m3fn": "uint8", "uint8": "uint8", "int8": "int8", "int32": "int32",
                     "float32": "float32"}


def _cupy_view(buf: xla_ffi.FfiBuffer, device: int):
    """An XLA buffer as a CuPy array (no copy; FP8 as its bytes, bf16 through ml_dtypes)."""
    import cupy
    import ml_dtypes
    import numpy as np

    dtype = np.dtype(ml_dtypes.bfloat16) if buf.dtype == "bfloat16" else np.dtype(_CUPY_VIEW_DTYPES[buf.dtype])
    nbytes = int(np.prod(buf.shape, dtype=np.int64)) * dtype.itemsize
    mem = cupy.cuda.UnownedMemory(buf.ptr, nbytes, None, device)
    return cupy.ndarray(buf.shape, dtype, cupy.cuda.MemoryPointer(mem, 0))


def _execute_moe(call: xla_ffi.Call, limit, batch_invariant: bool = False) -> None:
    """The MoE layer on XLA's buffers and stream: the eager layer (fp8gemm.moe, in the target's
    batch-invariant mode) on CuPy views of them, its intermediates from CuPy's pool on XLA's
    stream (stream-ordered reuse), writing the result buffer."""
    import cupy

    from .moe_layer import moe
    if len(call.args) != 8 or len(call.rets) != 1:
        raise ValueError(f"fp8gemm_moe takes 8 arguments and 1 result; got {len(call.args)} and {len(call.rets)}")
    device = call.device()
    with cupy.cuda.Device(device), cupy.cuda.ExternalStream(call.stream(), device):
        x, xs, ids, wts, w1, w1s, w2, w2s = (_cupy_view(b, device) for b in call.args)
        moe(x, ids, wts, w1, w1s, w2, w2s, x_scale=xs, limit=limit, out=_cupy_view(call.rets[0], device),
            batch_invariant=batch_invariant)


def moe_target(limit, batch_invariant: bool = False) -> str:
    """The FFI target of the MoE layer with SwiGLU clamp ``limit`` (None: no clamp) in one mode:
    one target per clamp value and mode, registered on first use (the handlers take no
    attributes)."""
    import struct
    clamp = "noclamp" if limit is None else f"{struct.unpack('<I', struct.pack('<f', float(limit)))[0]:08x}"
    return f"fp8gemm_moe_{clamp}" + ("_batch_invariant" if batch_invariant else "")


def _dtype_name(x) -> str:
    """A JAX value's dtype as fp8gemm names it (float8_e4m3fn, bfloat16, uint8, ...)."""
    dt = getattr(x, "dtype", None)
    return "none" if dt is None else str(dt)


def not_on_gpu_message(target: str) -> str:
    return (f"{target} runs fp8gemm's kernels on an NVIDIA SM90 GPU (H100 / H200), and this computation was "
            f"placed on the CPU: put its arrays on the GPU (jax.device_put(x, jax.devices('gpu')[0]), or "
            f"jax.default_device), with a CUDA build of jaxlib (pip install \"jax[cuda13]\" or \"jax[cuda12]\")")


def _register(target: str, fn, **kw) -> None:
    """``fn`` as the CUDA target, and on the CPU a handler that says the call needs the GPU (XLA's
    own error would be "No FFI handler registered for ... on a platform Host")."""
    xla_ffi.register(target, fn, "CUDA", **kw)

    def refuse(call, message=not_on_gpu_message(target)):
        raise ValueError(message)
    xla_ffi.register(target, refuse, "cpu")


def register() -> None:
    """Register the CUDA FFI targets (idempotent; each function does it on first use)."""
    for invariant, target in MATMUL_TARGETS.items():
        _register(target, lambda call, invariant=invariant: _execute(call, invariant), command_buffer_compatible=True)
    for masked in GROUPED_TARGETS:
        for invariant in (False, True):
            _register(grouped_target(masked, invariant),
                      lambda call, masked=masked, invariant=invariant: _execute_grouped(call, masked, invariant),
                      command_buffer_compatible=True)
    for kind, target in QUANT_TARGETS.items():
        _register(target, lambda call, kind=kind: _execute_quant(call, kind), command_buffer_compatible=True)


def _specs(**arrays):
    return [ArraySpec(name, _dtype_name(x), tuple(getattr(x, "shape", ()))) for name, x in arrays.items()]


def matmul(a, b, a_scale, b_scale, *, out_dtype="bfloat16", batch_invariant=None):
    """``C = (a * a_scale) @ (b * b_scale).T`` for JAX arrays, traceable under ``jax.jit``.

    Same rules as ``fp8gemm.matmul`` (a [..., K] and b [N, K] float8_e4m3fn or uint8/int8 bytes,
    a_scale [..., ceil(K/128)] and b_scale [ceil(N/128), ceil(K/128)] float32); returns
    [..., N] in ``out_dtype``. Kinds and shapes are checked at trace time (jit, eval_shape) by
    the eager rules, with their messages; pointers and devices at run time.
    ``batch_invariant``: as fp8gemm.matmul's; None takes the process-wide mode when the function
    is traced (a jitted function keeps the mode it was traced in).
    """
    register()
    return _matmul_op(normalize_out_dtype(out_dtype), resolve_invariant(batch_invariant))(a, b, a_scale, b_scale)


@functools.lru_cache(maxsize=None)
def _matmul_op(out_dtype: str, batch_invariant: bool = False):
    """The matmul call for one output dtype and mode (its FFI target), with its batching rule:
    ``vmap`` over the activations alone (a and / or a_scale batched, the weights shared) folds the
    batch into M, one launch (a's leading dimensions are M's); a batch of weights runs member by
    member."""
    import jax
    import jax.numpy as jnp

    @jax.custom_batching.custom_vmap
    def op(a, b, a_scale, b_scale):
        specs = _specs(a=a, b=b, a_scale=a_scale, b_scale=b_scale)
        check_gemm_kinds(*specs)
        sig = check_gemm_shapes(*specs, None, out_dtype)
        result = jax.ShapeDtypeStruct(sig.out_shape, jnp.dtype(sig.out_dtype))
        return jax.ffi.ffi_call(MATMUL_TARGETS[batch_invariant], result,
                                vmap_method="sequential")(a, b, a_scale, b_scale)

    @op.def_vmap
    def rule(axis_size, in_batched, a, b, a_scale, b_scale):
        def full(x, batched):
            return x if batched else jnp.broadcast_to(x, (axis_size,) + x.shape)
        a_b, b_b, sa_b, sb_b = in_batched
        if not (b_b or sb_b):
            return op(full(a, a_b), b, full(a_scale, sa_b), b_scale), True
        members = (full(a, a_b), full(b, b_b), full(a_scale, sa_b), full(b_scale, sb_b))
        return jax.lax.map(lambda xs: op(*xs), members), True

    return op


def _grouped(a, b, a_scale, b_scale, groups, out_dtype, masked, batch_invariant):
    import jax
    import jax.numpy as jnp

    register()
    name = "counts" if masked else "offsets"
    specs = _specs(a=a, b=b, a_scale=a_scale, b_scale=b_scale, **{name: groups})
    sig = check_grouped_signature(*specs, None, out_dtype, masked)
    result = jax.ShapeDtypeStruct(sig.out_shape, jnp.dtype(sig.out_dtype))
    target = grouped_target(masked, resolve_invariant(batch_invariant))
    return jax.ffi.ffi_call(target, result, vmap_method="sequential")(a, b, a_scale, b_scale, groups)


def grouped_matmul_contiguous(a, b, a_scale, b_scale, offsets, *, out_dtype="bfloat16", batch_invariant=None):
    """fp8gemm.grouped_matmul_contiguous for JAX arrays, traceable under ``jax.jit``: a [P, K],
    b [G, N, K], a_scale [P, ceil(K/128)], b_scale [G, ceil(N/128), ceil(K/128)], offsets [G + 1]
    int32 on the device; returns [P, N] (rows outside the groups unspecified). The eager rules
    and messages apply at trace time. ``batch_invariant``: as the eager function's; None takes
    the process-wide mode when the function is traced."""
    return _grouped(a, b, a_scale, b_scale, offsets, out_dtype, False, batch_invariant)


def grouped_matmul_masked(a, b, a_scale, b_scale, counts, *, out_dtype="bfloat16", batch_invariant=None):
    """fp8gemm.grouped_matmul_masked for JAX arrays, traceable under ``jax.jit``: a [G, max_rows,
    K], counts [G] int32 on the device; returns [G, max_rows, N] (rows at and past counts[g]
    unspecified). ``batch_invariant`` as in grouped_matmul_contiguous."""
    return _grouped(a, b, a_scale, b_scale, counts, out_dtype, True, batch_invariant)


def _quantize(x, kind):
    import jax
    import jax.numpy as jnp

    register()
    name = "x" if kind == "token" else "w"
    dt, shape = _dtype_name(x), tuple(getattr(x, "shape", ()))
    if dt not in _QUANT_IN:
        raise TypeError(f"{name} must be bfloat16, float16 or float32 (got {dt})")
    if kind == "token":
        if len(shape) < 1 or shape[-1] < 1:
            raise ValueError(f"x must have a last (K) dimension of at least 1 (shape {shape})")
        s_shape = shape[:-1] + (-(-shape[-1] // 128),)
    else:
        if len(shape) < 2:
            raise ValueError(f"w must be [..., N, K] (at least 2 dimensions); got shape {shape}")
        s_shape = shape[:-2] + (-(-shape[-2] // 128), -(-shape[-1] // 128))
    results = (jax.ShapeDtypeStruct(shape, jnp.float8_e4m3fn), jax.ShapeDtypeStruct(s_shape, jnp.float32))
    return jax.ffi.ffi_call(QUANT_TARGETS[kind], results, vmap_method="sequential")(x)


def quantize_per_token_group(x):
    """fp8gemm.quantize_per_token_group for JAX arrays under ``jax.jit``: x [..., K] bf16 / fp16 /
    fp32 -> (q [..., K] float8_e4m3fn, scale [..., ceil(K/128)] float32), bit for bit the eager
    and host quantizers (eps 1e-10)."""
    return _quantize(x, "token")


def quantize_per_block(w):
    """fp8gemm.quantize_per_block for JAX arrays under ``jax.jit``: w [..., N, K] -> (q [..., N, K]
    float8_e4m3fn, scale [..., ceil(N/128), ceil(K/128)] float32)."""
    return _quantize(w, "block")


def moe(x, topk_ids, topk_weights, w1, w1_scale, w2, w2_scale, *, x_scale=None, limit=10.0, batch_invariant=None):
    """fp8gemm.moe for JAX arrays, traceable under ``jax.jit``: x [T, H] FP8 with x_scale, or
    bf16 / fp16 / fp32 without (quantized first by quantize_per_token_group); topk_ids [T, k]
    int32, topk_weights [T, k] float32; w1 [E, 2I, H], w2 [E, H, I] FP8 with their block scales.
    Returns [T, H] bf16. The eager layer's rules apply at trace time. Not for XLA's command
    buffers: the layer takes its intermediates from CuPy's pool on XLA's stream.
    ``batch_invariant``: as fp8gemm.moe's; None takes the process-wide mode when the function is
    traced."""
    import jax
    import jax.numpy as jnp

    from .moe_layer import check_moe_signature, check_unscaled_x
    if x_scale is None:
        check_unscaled_x(_dtype_name(x))
        x, x_scale = quantize_per_token_group(x)
    ids = topk_ids.astype(jnp.int32) if _dtype_name(topk_ids) == "int64" else topk_ids
    specs = _specs(x=x, x_scale=x_scale, topk_ids=ids, topk_weights=topk_weights, w1=w1, w1_scale=w1_scale,
                   w2=w2, w2_scale=w2_scale)
    t, hidden = check_moe_signature(*specs)
    invariant = resolve_invariant(batch_invariant)
    target = moe_target(limit, invariant)
    _register(target, lambda call, limit=limit, invariant=invariant: _execute_moe(call, limit, invariant))
    result = jax.ShapeDtypeStruct((t, hidden), jnp.bfloat16)
    return jax.ffi.ffi_call(target, result, vmap_method="sequential")(x, x_scale, ids, topk_weights, w1, w1_scale,
                                                                       w2, w2_scale)


def _check_axes(mesh, **axes) -> None:
    """Each named mesh axis exists (else a ValueError naming the argument and the mesh's axes)."""
    names = tuple(getattr(mesh, "axis_names", ()))
    for arg, axis in axes.items():
        if axis is not None and axis not in names:
            raise ValueError(f"{arg}={axis!r} is not an axis of the mesh; its axes are {names}")


def _as_specs(mesh, arrays, specs):
    """The arrays laid out as shard_map's in_specs say. A mesh with Explicit axes (jax.make_mesh's
    default) makes shard_map refuse inputs whose sharding differs from in_specs: reshard them
    (a no-op for arrays already laid out so). Auto axes: shard_map reshards by itself."""
    import jax

    types = getattr(mesh, "axis_types", ())
    explicit = getattr(getattr(jax.sharding, "AxisType", None), "Explicit", None)
    if explicit is None or not any(t == explicit for t in types):
        return arrays
    from jax.sharding import NamedSharding
    return [jax.sharding.reshard(x, NamedSharding(mesh, spec)) for x, spec in zip(arrays, specs)]


def moe_ep(x, topk_ids, topk_weights, w1, w1_scale, w2, w2_scale, *, mesh, axis, x_scale=None, limit=10.0,
           capacity=None, local_layer=None, batch_invariant=None):
    """The MoE layer with its experts spread over mesh axis ``axis`` (jax.shard_map), tokens
    exchanged with ``jax.lax.all_to_all``: the JAX form of fp8gemm.moe_ep (same dispatch into
    fixed slots of ``capacity`` rows per destination, default T_local * k; same slot-order FP32
    combine). x [T, H] (bf16 / fp16 / fp32, or FP8 with x_scale), topk_ids / topk_weights [T, k]
    sharded on T over ``axis``; w1 [E, 2I, H], w2 [E, H, I] and their scales sharded on E over
    ``axis`` (E / shards experts a device). Returns [T, H] bf16 sharded like x. ``local_layer``
    replaces each device's layer (default fp8gemm.jax.moe; tests use a host stand-in).
    ``batch_invariant``: moe's, for every device's layer (None: the process-wide mode when traced;
    a ``local_layer`` is called as before); a token's row is then the same whatever the other
    tokens as long as none of its pairs is dropped (``capacity``)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    _check_axes(mesh, axis=axis)
    world = mesh.shape[axis]
    invariant = resolve_invariant(batch_invariant)
    layer = local_layer or (lambda *a, x_scale, limit: moe(*a, x_scale=x_scale, limit=limit,
                                                           batch_invariant=invariant))
    quantize_here = x_scale is None

    def shard(x, xs, ids, wts, w1, w1s, w2, w2s):
        if quantize_here:                                             # each device its own tokens
            x, xs = quantize_per_token_group(x)
        t, top_k = ids.shape
        hidden, local = x.shape[1], w1.shape[0]
        cap = t * top_k if capacity is None else int(capacity)
        pairs = t * top_k
        expert = ids.reshape(-1).astype(jnp.int32)
        valid = (expert >= 0) & (expert < world * local)
        dest = jnp.where(valid, expert // local, world)
        order = jnp.argsort(dest, stable=True)
        dest_sorted = dest[order]
        counts = jnp.zeros(world + 1, jnp.int32).at[dest_sorted].add(1)
        starts = jnp.cumsum(counts) - counts
        pos_sorted = jnp.arange(pairs, dtype=jnp.int32) - starts[dest_sorted]
        keep = (dest_sorted < world) & (pos_sorted < cap)
        slot_sorted = jnp.where(keep, dest_sorted * cap + pos_sorted, world * cap)
        slot = jnp.zeros(pairs, jnp.int32).at[order].set(slot_sorted)
        token = jnp.arange(pairs) // top_k
        x_bytes = jax.lax.bitcast_convert_type(x, jnp.uint8)
        send_x = jnp.zeros((world * cap + 1, hidden), jnp.uint8).at[slot].set(x_bytes[token])[:-1]
        send_s = jnp.zeros((world * cap + 1, xs.shape[1]), jnp.float32).at[slot].set(xs[token])[:-1]
        send_e = jnp.full((world * cap + 1,), -1, jnp.int32).at[slot].set(
            jnp.where(valid, expert % local, -1))[:-1]
        a2a = lambda v: jax.lax.all_to_all(v, axis, 0, 0, tiled=True)
        rows = jax.lax.bitcast_convert_type(a2a(send_x), jnp.float8_e4m3fn)
        y = layer(rows, a2a(send_e).reshape(-1, 1), jnp.ones((world * cap, 1), jnp.float32), w1, w1s, w2, w2s,
                  x_scale=a2a(send_s), limit=limit)
        back = jnp.concatenate([a2a(y.astype(jnp.bfloat16)), jnp.zeros((1, hidden), jnp.bfloat16)])
        y_pair = back[slot].astype(jnp.float32).reshape(t, top_k, hidden)
        acc = jnp.zeros((t, hidden), jnp.float32)
        for j in range(top_k):                                        # slot order: deterministic
            acc = acc + wts[:, j, None].astype(jnp.float32) * y_pair[:, j]
        return acc.astype(jnp.bfloat16)

    in_specs = (P(axis, None), P(axis, None), P(axis, None), P(axis, None), P(axis, None, None),
                P(axis, None, None), P(axis, None, None), P(axis, None, None))
    f = jax.shard_map(shard, mesh=mesh, in_specs=in_specs, out_specs=P(axis, None), check_vma=False)
    if quantize_here:       # a placeholder for x_scale, sharded like x (the shard quantizes)
        x_scale = jnp.zeros((x.shape[0], 1), jnp.float32)
    return f(*_as_specs(mesh, (x, x_scale, topk_ids, topk_weights, w1, w1_scale, w2, w2_scale), in_specs))


def sharded_matmul(a, b, a_scale, b_scale, *, mesh, tokens=None, weights=None, out_dtype="bfloat16",
                   batch_invariant=None):
    """fp8gemm.jax.matmul per shard under ``jax.jit`` (jax.shard_map): the tokens (M) split over
    mesh axis ``tokens`` and the weight rows (N) over mesh axis ``weights`` (either may be None),
    K whole on every device, so that each device runs the GEMM of its own rows and columns with
    no all-gather of A, B or their scales. a [M, K] with a_scale [M, ceil(K/128)]; b [N, K] with
    b_scale [ceil(N/128), ceil(K/128)]; returns [M, N] sharded (tokens, weights). Each weight
    shard must hold whole 128-row scale blocks (N / shards a multiple of 128), and M must divide
    by the token shards. Either mesh works: ``Mesh(...)`` (Auto axes) or ``jax.make_mesh``
    (Explicit axes; inputs laid out otherwise are resharded to the specs first).
    ``batch_invariant``: matmul's, for every shard."""
    import jax
    from jax.sharding import PartitionSpec as P

    def size(axis):
        return 1 if axis is None else mesh.shape[axis]

    _check_axes(mesh, tokens=tokens, weights=weights)
    if tokens is not None and tokens == weights:
        raise ValueError(f"tokens and weights must be different mesh axes; both are {tokens!r}")
    if len(getattr(a, "shape", ())) != 2:
        raise ValueError(f"a must have shape [M, K] for sharded_matmul; got {getattr(a, 'shape', None)}")
    m, n = a.shape[0], b.shape[0]
    if m % size(tokens):
        raise ValueError(f"M = {m} must divide by the {size(tokens)} token shards of mesh axis {tokens!r}")
    if n % (128 * size(weights)):
        raise ValueError(f"N = {n} must be a multiple of 128 x the {size(weights)} weight shards of mesh axis "
                         f"{weights!r}: each shard needs whole 128-row blocks of b_scale")
    in_specs = (P(tokens, None), P(weights, None), P(tokens, None), P(weights, None))
    invariant = resolve_invariant(batch_invariant)
    f = jax.shard_map(lambda a_, b_, sa_, sb_: matmul(a_, b_, sa_, sb_, out_dtype=out_dtype,
                                                      batch_invariant=invariant),
                      mesh=mesh, in_specs=in_specs, out_specs=P(tokens, weights), check_vma=False)
    return f(*_as_specs(mesh, (a, b, a_scale, b_scale), in_specs))
