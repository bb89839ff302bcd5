"""The MoE layer on the GPU: routing, two grouped GEMMs and the glue between them (with
``fused=True``, the SwiGLU in L1's epilogue instead).

    out[t] = sum_j  w[t, j] * L2[e](requant(swiglu(L1[e](x[t]))))     e = ids[t, j], j = 0..k-1

(fp8gemm.moe_reference.moe is the float64 definition.) Every step runs on the caller's stream
with no host sync, in this order (kernels_cu/moe_glue.cu for the glue):

1. route: count the pairs per expert and scan them into offsets [E + 1] (one single-block kernel),
   then copy every (token, slot) pair's FP8 row and scales into its expert's range of rows (the
   order inside a range comes from atomics; each row's results depend on that row alone, so the
   output does not);
2. L1: fp8gemm.grouped_matmul_contiguous into h [P, 2I] in FP32 (P = T * k pairs), promoted per
   128-K block (precise_fp32=False: ~2e-4 relative; the per-wgmma promotion cost 1.5x at 4096
   tokens, bench/NOTES.md);
3. SwiGLU with DeepSeek-V4's clamp, then per-1x128 FP8 requantization, exactly as the reference
   quantizes (an FP32 h within ~2e-4 of the float64 one lands on another FP8 code for ~3e-3 of
   the elements, one code step each);
4. L2: fp8gemm.grouped_matmul_contiguous into y [P, H] bf16;
   at about 100-225 rows per expert (dispatch/grouped.py: MOE_CHOICE_ROWS) the route kernel also gives each
   expert, from its real count, the two- or three-warpgroup kernel for both GEMMs (choice_costs
   in moe_glue.cu; rows laid out with the first kernel's experts first): each GEMM launches
   both, each with its own experts and the others empty (no host sync, so a captured graph
   re-decides on every replay);
5. combine: out[t] = sum of w[t, j] * y[row of (t, j)] in slot order, FP32, stored bf16.

Fused: steps 2 and 3 are one kernel (grouped.swiglu_l1, kernels_cu/swiglu_epilogue.cuh) whose
epilogue computes step 3 from the same FP32 values, so it writes the same FP8 act and scales (the
output is identical bit for bit, except where the chain's L1 splits K: its partial sums then add
in another order, and a few outputs may differ in their last bits) while h [P, 2I] never reaches
memory. By default (``fused=None``) the layer fuses where the host's rows estimate lies in
dispatch/grouped.py's FUSED_ROWS, where it measured faster than the chain on the H200 (its 128-row
tiles against the chain's swap-AB ones);
``fused=True`` / ``False`` force one path.
"""
from __future__ import annotations

import math
import threading

from . import compiler, driver, output
from .dispatch import invariant as invariant_mode
from .dispatch.grouped import device_choice, fused_default
from .dtypes import FP8_DTYPES, SWIGLU_LIMIT
from .grouped import grouped_matmul_contiguous, rows_estimate, run_grouped, swiglu_l1
from .intake import JAX, TORCH, framework_of, intake
from .launcher import KernelParams, launch
from .plans import PLANS, remember
from .quantize import quantize_per_token_group
from .hw import MAX_GROUPS

_VARIANT = "moe_glue"
ROUTE, SCATTER, SWIGLU, COMBINE = range(4)           # moe_glue.cu: moe::Op
THREADS, SCAN_THREADS = 256, 1024
MAX_BLOCKS = 4096                                    # grid-stride ops: enough to fill 132 SMs
# moe_glue_kernel's argument slots that hold a pointer to this call's arrays (the others -- pairs,
# top_k, E, rows, cols, limit -- are fixed by the glue plan's key).
_PTR_SLOTS = (0, 1, 5, 6, 7, 8, 9, 10, 11, 12)
_glue_lock = threading.Lock()


class _GluePlan:
    """The four glue launches of one layer shape, prebuilt: launch prefixes and argument blocks
    whose scalar slots are fixed; a call rewrites only the pointer slots (host overhead: building
    the four blocks took most of the glue's host time, lab/moe_host.py)."""

    def __init__(self, device, t, pairs, top_k, experts, hidden, inter, lim):
        ops = ((ROUTE, 1, SCAN_THREADS, 0, 0),
               (SCATTER, min(-(-pairs * 32 // THREADS), MAX_BLOCKS), THREADS, 0, hidden),
               (SWIGLU, -(-pairs * (inter // 128) * 32 // THREADS), THREADS, pairs, inter),
               (COMBINE, t, THREADS, t, hidden))
        self.launches = {}
        for op, grid, threads, rows, cols in ops:
            kern = compiler.get_kernel(device, _VARIANT, (op,), 0)
            params = KernelParams((("u64", 0), ("u64", 0), ("u32", pairs), ("u32", top_k), ("u32", experts),
                                   ("u64", 0), ("u64", 0), ("u64", 0), ("u64", 0), ("u64", 0), ("u64", 0),
                                   ("u64", 0), ("u64", 0), ("u32", rows), ("u32", cols), ("f32", lim)))
            self.launches[op] = (driver.launch_args(kern.kernel.ptr, grid, threads, 0), params)
        self.lock = threading.Lock()

    def run(self, device, stream, op, pointers):
        """Launch glue op ``op`` with the 10 pointers of _PTR_SLOTS, in that order."""
        prefix, params = self.launches[op]
        with self.lock:               # one argument block per op: fill and launch as one step
            for slot, ptr in zip(_PTR_SLOTS, pointers):
                params.set_u64(slot, ptr)
            launch(device, prefix, stream, params.address)


def _glue_plan(device, t, pairs, top_k, experts, hidden, inter, lim) -> _GluePlan:
    key = ("moe_glue", device, t, pairs, top_k, experts, hidden, inter, lim)
    plan = PLANS.get(key)
    if plan is None:
        plan = _GluePlan(device, t, pairs, top_k, experts, hidden, inter, lim)
        with _glue_lock:
            remember(key, plan)
    return plan


def moe(x, topk_ids, topk_weights, w1, w1_scale, w2, w2_scale, *, x_scale=None, limit=SWIGLU_LIMIT,
        fused: bool | None = None, out=None, batch_invariant: bool | None = None):
    """One MoE layer -> out [T, H] bf16, in the caller's framework, on its stream.

    x            [T, H]: FP8 E4M3 (or uint8 bytes) with ``x_scale`` [T, ceil(H/128)] float32; or
                 bf16 / fp16 / fp32 with x_scale None (quantized here per 1 x 128 group).
    topk_ids     [T, k] int32 (or int64) expert ids; pairs with an id outside 0..E-1 are dropped.
    topk_weights [T, k] float32.
    w1, w1_scale [E, 2I, H] FP8 (gate rows, then up rows) with [E, ceil(2I/128), ceil(H/128)].
    w2, w2_scale [E, H, I] FP8 with [E, ceil(H/128), I/128].
    limit        the SwiGLU clamp (gate <= limit, |up| <= limit); None: no clamp.
    fused        True: SwiGLU and the requantization in L1's epilogue (no [P, 2I] intermediate; the
                 same FP32 values, bit for bit the chain unless its L1 splits K); False: the chain;
                 None: whichever measured faster at this size (see above; fp8gemm.explain_moe
                 says which).
    out          optional [T, H] bf16, contiguous, 16-byte aligned: written and returned (every row).
    batch_invariant  True: a token's output row is bitwise the same whatever the other tokens and
                 their routing (both grouped GEMMs on the batch-invariant tile, never split, never
                 chosen by the rows per expert; the chain unless ``fused=True`` is passed); None:
                 the process-wide mode (fp8gemm.set_batch_invariant, $FP8GEMM_BATCH_INVARIANT=1).
    H must be a multiple of 16 and I of 128; every array contiguous and on one GPU.
    """
    if fused is not None and not isinstance(fused, bool):
        raise TypeError(f"fused must be True, False or None (got {fused!r})")
    framework = framework_of(x)
    stream_for = output.stream_for_framework(framework)
    if x_scale is None:
        check_unscaled_x(str(getattr(x, "dtype", "")).replace("torch.", ""))
        x, x_scale = quantize_per_token_group(x)
    tx = intake(x, "x", stream_for)
    txs = intake(x_scale, "x_scale", stream_for)
    ids = _as_dtype(topk_ids, "topk_ids", ("int32", "int64"), "int32", framework, stream_for)
    wts = _as_dtype(topk_weights, "topk_weights", ("float32",), "float32", framework, stream_for)
    tw1 = intake(w1, "w1", stream_for)
    tw2 = intake(w2, "w2", stream_for)
    t, hidden, top_k, experts, inter = _check(tx, txs, ids, wts, tw1, tw2)
    device = tx.device
    tout = _check_out(intake(out, "out", stream_for), t, hidden, device) if out is not None else None
    pairs = t * top_k
    if pairs == 0:
        if out is not None:
            return out
        out, _ = output.allocate(framework, (t, hidden), "bfloat16", device)
        return output.finish(framework, out, (t, hidden), "bfloat16", device, stream_for(device))
    stream = stream_for(device)
    groups_h = -(-hidden // 128)

    def buf(shape, dtype):
        return output.allocate(framework, shape, dtype, device)

    counts, counts_p = buf((experts,), "int32")
    offsets, offsets_p = buf((experts + 1,), "int32")
    fill, fill_p = buf((experts,), "int32")
    pair_row, pair_row_p = buf((pairs,), "int32")
    xs, xs_p = buf((pairs, hidden), "float8_e4m3fn")
    xs_scale, xs_scale_p = buf((pairs, groups_h), "float32")
    act, act_p = buf((pairs, inter), "float8_e4m3fn")
    act_scale, act_scale_p = buf((pairs, inter // 128), "float32")
    y, y_p = buf((pairs, hidden), "bfloat16")
    given = out
    out, out_p = (out, tout.ptr) if tout is not None else buf((t, hidden), "bfloat16")
    lim = math.inf if limit is None else float(limit)

    plan = _glue_plan(device, t, pairs, top_k, experts, hidden, inter, lim)
    common = (ids.ptr, wts.ptr, counts_p, offsets_p, fill_p, pair_row_p)

    def glue(op, src=0, src_scale=0, dst=0, dst_scale=0):
        plan.run(device, stream, op, common + (src, src_scale, dst, dst_scale))

    # Prefill at about 100-225 rows per expert: the routing kernel also picks each expert's grouped
    # GEMM kernel from its real count and writes each kernel its offsets (the other kernel's
    # experts empty).
    per_expert, _ = rows_estimate(pairs, experts)              # what the grouped GEMMs estimate
    invariant = invariant_mode.resolve(batch_invariant)
    if fused is None:
        # batch-invariant: one path for every batch (the chain; the choice must not read the size)
        fused = False if invariant else fused_default(per_expert)
    choose = not invariant and device_choice(per_expert, fused)
    if choose:
        choice, choice_p = buf((2, experts + 1), "int32")
        glue(ROUTE, 0, 0, choice_p)        # + choice [2][E + 1]: two-warpgroup, three-warpgroup offsets
    else:
        glue(ROUTE)                        # counts, offsets, fill (one block; E <= MAX_GROUPS = 8192)
    glue(SCATTER, tx.ptr, txs.ptr, xs_p, xs_scale_p)

    def gemm(a, w, a_scale, w_scale, out, precise):
        if not choose:
            return grouped_matmul_contiguous(a, w, a_scale, w_scale, offsets, out=out, precise_fp32=precise,
                                             batch_invariant=invariant)
        for row, wg3 in ((0, False), (1, True)):
            run_grouped(a, w, a_scale, w_scale, choice[row], "offsets", False, None, out, (128, 128), None,
                     precise, wg3)

    if fused:
        swiglu_l1(xs, w1, xs_scale, w1_scale, offsets, act_p, act_scale_p, lim)
    else:
        h, h_p = buf((pairs, 2 * inter), "float32")
        gemm(xs, w1, xs_scale, w1_scale, h, False)
        glue(SWIGLU, h_p, 0, act_p, act_scale_p)
    gemm(act, w2, act_scale, w2_scale, y, True)
    glue(COMBINE, y_p, 0, out_p, 0)
    # The intermediates go back to the caller's allocator here; it orders their reuse after this
    # stream's work (torch's caching allocator and CuPy's pool are both stream-ordered).
    if given is not None:
        return given
    return output.finish(framework, out, (t, hidden), "bfloat16", device, stream)


def _check_out(tout, t, hidden, device):
    """The layer's out=: [T, H] bf16, row-major and 16-byte aligned (the combine stores 16 bytes
    at a time), on x's GPU, writable."""
    if tout.framework == JAX or tout.read_only:
        raise TypeError("out must be a writable CuPy or torch array (JAX arrays are immutable; leave out=None)")
    if tout.dtype != "bfloat16" or tout.shape != (t, hidden):
        raise ValueError(f"out must be bfloat16 [T, H] = {(t, hidden)}; got {tout.dtype} {tout.shape}")
    if tout.device != device:
        raise ValueError("out must be on the GPU of x")
    _contiguous(tout, "out")
    if tout.ptr % 16:
        raise ValueError("out's data pointer must be 16-byte aligned")
    return tout


def _as_dtype(arr, name, accepted, want, framework, stream_for):
    """intake ``arr``; an accepted dtype other than ``want`` is converted by the caller's framework."""
    t = intake(arr, name, stream_for)
    if t.dtype not in accepted:
        raise TypeError(f"{name} must be {' or '.join(accepted)}; got dtype {t.dtype}")
    if t.dtype != want:
        if framework == TORCH:
            import torch

            arr = arr.to(getattr(torch, want))
        elif framework == JAX:
            arr = arr.astype(want)
        else:
            arr = arr.astype(want)
        t = intake(arr, name, stream_for)
    return t


def _contiguous(t, name):
    if 0 in t.shape:
        return                   # an empty array's strides mean nothing (CuPy reports zeros)
    want, acc = [], 1
    for d in reversed(t.shape):
        want.append(acc)
        acc *= d
    if any(s != w for s, w, d in zip(t.strides, reversed(want), t.shape) if d > 1):
        raise ValueError(f"{name} must be contiguous (row-major); got strides {t.strides} for shape {t.shape}")


def check_unscaled_x(dtype: str) -> None:
    """Without x_scale the layer quantizes x, so x must not be FP8 already."""
    if dtype in FP8_DTYPES:
        raise TypeError(f"x is FP8 ({dtype}) but x_scale is None: pass its per-token-group scales as x_scale=, "
                        f"or a bfloat16 / float16 / float32 x for the layer to quantize")


def check_moe_shapes(tx, txs, ids, wts, tw1, tw2) -> tuple:
    """The layer's dtype and shape rules (arguments: intake Tensors or ArraySpecs; the grouped
    GEMMs check the weights' and scales' layouts): returns (T, H, k, E, I). Eager calls and the
    torch operator's fake kernel share them."""
    if tx.dtype not in FP8_DTYPES:
        raise TypeError(f"x must be FP8 E4M3 (or uint8 bytes) with x_scale, or bf16/fp16/fp32 without; "
                        f"got dtype {tx.dtype}")
    if len(tx.shape) != 2:
        raise ValueError(f"x must be [T, H]; got shape {tx.shape}")
    t, hidden = tx.shape
    if hidden % 16:
        raise ValueError(f"H (x.shape[1]) must be a multiple of 16; got {hidden}")
    if txs.dtype != "float32" or txs.shape != (t, -(-hidden // 128)):
        raise ValueError(f"x_scale must be float32 [T, ceil(H/128)] = {(t, -(-hidden // 128))}; "
                         f"got {txs.dtype} {txs.shape}")
    if len(ids.shape) != 2 or ids.shape[0] != t or ids.shape[1] < 1:
        raise ValueError(f"topk_ids must be [T, k] with T = {t}; got shape {ids.shape}")
    if wts.shape != ids.shape:
        raise ValueError(f"topk_weights must have topk_ids' shape {ids.shape}; got {wts.shape}")
    if len(tw1.shape) != 3 or len(tw2.shape) != 3:
        raise ValueError(f"w1 must be [E, 2I, H] and w2 [E, H, I]; got {tw1.shape} and {tw2.shape}")
    experts, two_i, h1 = tw1.shape
    inter = two_i // 2
    if h1 != hidden or two_i != 2 * inter:
        raise ValueError(f"w1 must be [E, 2I, H] with H = {hidden}; got {tw1.shape}")
    if inter % 128 or inter == 0:
        raise ValueError(f"I (w1.shape[1] / 2) must be a positive multiple of 128; got {inter}")
    if tw2.shape != (experts, hidden, inter):
        if tw2.shape[1] == hidden:      # w2 agrees with x: w1 and w2 disagree on E or I
            raise ValueError(f"w1 [E, 2I, H] and w2 [E, H, I] disagree: w1 {tw1.shape} has E = {experts}, "
                             f"I = {inter}; w2 {tw2.shape} has E = {tw2.shape[0]}, I = {tw2.shape[2]}")
        raise ValueError(f"w2 must be [E, H, I] = {(experts, hidden, inter)}; got {tw2.shape}")
    if not 1 <= experts <= MAX_GROUPS:
        raise ValueError(f"E must be 1..{MAX_GROUPS}; got {experts}")
    return t, hidden, ids.shape[1], experts, inter


def check_moe_signature(x, x_scale, ids, wts, w1, w1_scale, w2, w2_scale) -> tuple:
    """The layer's trace-time rules on ArraySpecs (x already FP8 with its scales; the torch
    operator's fake and fp8gemm.jax.moe): the routing dtypes, check_moe_shapes, and the grouped
    GEMMs' rules for each weight and its scales. Returns (T, H)."""
    from .validate import ArraySpec, check_gemm_kinds, check_group_layout
    for spec, accepted in ((ids, ("int32", "int64")), (wts, ("float32",))):
        if spec.dtype not in accepted:
            raise TypeError(f"{spec.name} must be {' or '.join(accepted)}; got dtype {spec.dtype}")
    t, hidden, _, experts, _ = check_moe_shapes(x, x_scale, ids, wts, w1, w2)
    offsets = ArraySpec("offsets", "int32", (experts + 1,))
    for w, ws, a_name in ((w1, w1_scale, "x"), (w2, w2_scale, "act")):
        k = w.shape[2]
        a = ArraySpec(a_name, "float8_e4m3fn", (1, k))
        check_group_layout(a, w, ws, offsets, False)
        check_gemm_kinds(a, w, ArraySpec("a_scale", "float32", (1, -(-k // 128))), ws)
    return t, hidden


def _check(tx, txs, ids, wts, tw1, tw2):
    """check_moe_shapes, then devices, contiguity and alignment: returns (T, H, k, E, I)."""
    shapes = check_moe_shapes(tx, txs, ids, wts, tw1, tw2)
    for arr, name in ((tx, "x"), (txs, "x_scale"), (ids, "topk_ids"), (wts, "topk_weights")):
        if arr.device is None or arr.device != tx.device:
            raise ValueError(f"{name} must be on the GPU of x")
        _contiguous(arr, name)
    if tx.ptr % 16:
        raise ValueError("x's data pointer must be 16-byte aligned; pass a fresh contiguous array")
    return shapes
