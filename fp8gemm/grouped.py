"""Grouped block-FP8 GEMM for mixture-of-experts layers: one launch multiplies each group of rows
of A by its own weight matrix. Same intake, validation, launcher and output stages as matmul; the
kernel is the general kernel's grouped mode (kernels_cu/scheduler.cuh: group_tile_prefix).

Two layouts of the rows:

* contiguous (prefill): ``a`` [P, K] holds every group's rows one group after the other;
  ``offsets`` [G + 1] int32, group g owns rows offsets[g] .. offsets[g+1] - 1.
* masked (decode, CUDA graphs): ``a`` [G, max_rows, K]; ``counts`` [G] int32, group g owns rows
  0 .. counts[g] - 1 of a[g].

``offsets`` / ``counts`` may stay on the GPU: the kernel reads them there, so nothing waits for the
host and a captured CUDA graph replays with whatever counts the buffer holds. Device values are
not checked (that would need a host sync); the kernel clamps them into the arrays' bounds, so a
bad value gives wrong rows, never an out-of-bounds access. Host sequences (list, tuple, numpy) are
checked, then copied to the GPU.
"""
from __future__ import annotations

import numpy as np

from . import output
from .dispatch import grouped as tiles
from .dispatch import invariant as invariant_mode
from .dispatch.dense import grouped_as_ok
from .dispatch.grouped import rows_estimate  # noqa: F401 - fp8gemm.moe's and the tests' name for it
from .intake import CUPY, TORCH, framework_of, intake
from .launcher import building, sm_count
from .plans import PLANS, execute, plan_key, remember
from .validate import check_block_size, out_row_stride, validate_grouped


def grouped_matmul_contiguous(a, b, a_scale, b_scale, offsets, *, out_dtype=None, out=None,
                              block_size=(128, 128), precise_fp32: bool = True, config=None,
                              batch_invariant: bool | None = None):
    """C[rows of group g] = (A * As)[rows] @ (B[g] * Bs[g])^T with FP32 accumulation -> [P, N].

    a        [P, K] FP8 E4M3, the groups' rows one group after the other (K-contiguous).
    b        [G, N, K] FP8 E4M3, one weight matrix per group, stacked without gaps.
    a_scale  [P, ceil(K/128)] float32; b_scale [G, ceil(N/128), ceil(K/128)] float32.
    offsets  [G + 1] int32, nondecreasing: group g owns rows offsets[g] .. offsets[g+1] - 1. On the
             GPU (not checked, clamped in the kernel) or a host sequence (checked).
    precise_fp32  with float32 output: True promotes the tensor cores' partial sums after every
             32-wide K step (relative error < 1e-4); False after every 128-wide K block, like bf16
             and fp16 outputs (~2e-4, and 1.5x faster on big compute-bound calls: bench/NOTES.md,
             bench/NOTES.md). fp8gemm.moe takes False for its FP32 intermediate.
    config   a grouped tile to force (fp8gemm.dispatch: General with 128-row tiles, SwapAB, Wg3,
             or Dense with its K-major switch; tests and benchmarks); None: the estimate's
             (dispatch/grouped.py: candidate).
    batch_invariant  True: a row's result is bitwise the same whatever the other rows and groups
             (the plain matmul's batch-invariant tile for every group size:
             dispatch/invariant.py); None: the process-wide mode (fp8gemm.set_batch_invariant).
    Rows of ``out`` outside offsets[0] .. offsets[G] - 1 are not written (a fresh result leaves
    them uninitialized). Other arguments as fp8gemm.matmul.
    """
    return run_grouped(a, b, a_scale, b_scale, offsets, "offsets", False, out_dtype, out, block_size, None,
                       precise_fp32, config=config, batch_invariant=batch_invariant)


def grouped_matmul_masked(a, b, a_scale, b_scale, counts, *, out_dtype=None, out=None,
                          expected_rows: int | None = None, block_size=(128, 128), config=None,
                          batch_invariant: bool | None = None):
    """C[g, :counts[g]] = (A[g] * As[g])[:counts[g]] @ (B[g] * Bs[g])^T -> [G, max_rows, N].

    a        [G, max_rows, K] FP8 E4M3; a_scale [G, max_rows, ceil(K/128)] float32.
    b        [G, N, K] FP8 E4M3; b_scale [G, ceil(N/128), ceil(K/128)] float32.
    counts   [G] int32 in 0..max_rows. On the GPU (not checked, clamped in the kernel) or a host
             sequence (checked).
    expected_rows  optional: about how many rows all groups hold together (sum of counts), a
             tiling hint for decode (the counts stay on the GPU); any value gives correct results.
    config   a grouped tile to force, as in grouped_matmul_contiguous.
    batch_invariant  as in grouped_matmul_contiguous (expected_rows then changes nothing).
    Rows at and past counts[g] are neither read for the result nor written (a fresh result leaves
    them uninitialized). Other arguments as fp8gemm.matmul.
    """
    return run_grouped(a, b, a_scale, b_scale, counts, "counts", True, out_dtype, out, block_size, expected_rows,
                       config=config, batch_invariant=batch_invariant)


def _host_groups(values, name: str, masked: bool, a_shape: tuple, num_groups: int):
    """Check a host sequence of offsets / counts against a's rows; int32 numpy array."""
    v = np.asarray(values)
    if v.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers; got dtype {v.dtype}")
    want = num_groups if masked else num_groups + 1
    if v.shape != (want,):
        raise ValueError(f"{name} must have shape ({want},) for G = {num_groups} groups; got {v.shape}")
    if masked:
        rows = a_shape[1] if len(a_shape) == 3 else 0
        if v.size and (v.min() < 0 or v.max() > rows):
            raise ValueError(f"counts must lie in 0..max_rows = {rows}; got {v.tolist()}")
    else:
        rows = a_shape[0] if a_shape else 0
        if v[0] < 0 or v[-1] > rows or np.any(np.diff(v) < 0):
            raise ValueError(f"offsets must be nondecreasing within 0..P = {rows}; got {v.tolist()}")
    return v.astype(np.int32)


def _upload(values, framework: str, device: int):
    """A host int32 array on ``device``, allocated by the framework whose stream we launch on (its
    allocator then orders reuse of the memory after our kernel)."""
    if framework == TORCH:
        import torch

        return torch.as_tensor(values, device=f"cuda:{device}")
    import cupy

    with cupy.cuda.Device(device):
        return cupy.asarray(values)


def _group_estimate(gp, expected_rows):
    """(rows per non-empty group, non-empty groups), estimated on the host (the counts stay on
    the GPU). Contiguous: all P rows over at most min(G, P) groups, doubled for uneven routing.
    Masked: at most max_rows per group, or the caller's expected_rows spread the same way."""
    g = gp.num_groups
    if gp.group_rows:
        if expected_rows is None:
            return gp.group_rows, g
        per_group, active = rows_estimate(expected_rows, g)
        return min(gp.group_rows, per_group), active
    return rows_estimate(gp.gemm.m, g)


def run_grouped(a, b, a_scale, b_scale, groups, name, masked, out_dtype, out, block_size, expected_rows,
                precise_fp32=True, wg3=None, config=None, batch_invariant=None):
    """Both layouts' common path (fp8gemm.moe calls it with its own tile choice, ``wg3``; tests
    and benchmarks force one, ``config``; ``batch_invariant`` None: the process-wide mode, which
    a forced config or a wg3 choice overrides)."""
    if type(block_size) is not tuple or block_size != (128, 128):
        check_block_size(block_size)
    if config is not None:
        if batch_invariant:
            raise ValueError("batch_invariant=True chooses the tile itself; it cannot take a forced config=")
        tiles.check_grouped_config(config)
    invariant = (invariant_mode.ENABLED if batch_invariant is None and config is None and wg3 is None
                 else bool(batch_invariant))
    framework = framework_of(a)
    stream_for = output.stream_for_framework(framework)
    # Keyed by the groups array too (entries: GroupedProblem, launch plan or None, out= pointer or
    # None); host sequences skip the cache.
    arrays = (a, b, a_scale, b_scale, groups) + ((out,) if out is not None else ())
    key = plan_key("grouped", framework, out_dtype, *arrays) if framework in (CUPY, TORCH) else None
    if key is not None:
        key = key + (masked, expected_rows, bool(precise_fp32), wg3, None if config is None else config.key(),
                     invariant)
        entry = PLANS.get(key)
        if entry is not None:
            gp, runner, out_ptr = entry
            if out is None:
                return execute(framework, stream_for, gp.gemm, runner, None, None)
            if runner is not None:
                runner.run(out_ptr, stream_for(gp.gemm.device))
            return out

    ta = intake(a, "a", stream_for)
    tb = intake(b, "b", stream_for)
    if isinstance(groups, (list, tuple, range, np.ndarray)):          # host values: check, copy over
        if ta.device is None:
            raise ValueError("a is on the CPU; fp8gemm needs CUDA arrays on one GPU")
        num_groups = tb.shape[0] if tb.ndim == 3 else 0
        groups = _upload(_host_groups(groups, name, masked, ta.shape, num_groups), framework, ta.device)
    tg = intake(groups, name, stream_for)
    tsa = intake(a_scale, "a_scale", stream_for)
    tsb = intake(b_scale, "b_scale", stream_for)
    tout = intake(out, "out", stream_for) if out is not None else None
    gp = validate_grouped(ta, tb, tsa, tsb, tg, tout, out_dtype, masked)
    p = gp.gemm
    if tout is None:
        ldc, aligned = p.n, True
    else:
        ldc, aligned = out_row_stride(tout, p.n) if p.m > 0 else p.n, tout.ptr % 16 == 0
    runner = (plan_grouped_problem(gp, expected_rows, bool(precise_fp32), wg3, ldc, aligned, config, invariant)
              if p.m > 0 else None)
    if key is not None:
        remember(key, (gp, runner, None if tout is None else tout.ptr))
    return execute(framework, stream_for, p, runner, tout, out)


def plan_grouped_problem(gp, expected_rows, precise_fp32: bool, wg3, ldc: int, out_aligned: bool, config=None,
                         batch_invariant: bool = False):
    """The tile for a validated grouped problem (dispatch/grouped.py, from the host's estimate of
    the rows per group; or ``config``, checked against the problem; or with ``batch_invariant``
    the mode's, chosen by N, K, out dtype and G alone) and its launch plan."""
    p = gp.gemm
    if config is None and batch_invariant:
        cand = invariant_mode.invariant_grouped_candidate(p.n, p.k, p.out_dtype, gp.num_groups)
    elif config is not None:
        tiles.check_grouped_config(config, p.out_dtype, gp.num_groups, precise_fp32,
                                   tiles.GemmDesc(max(p.m, 1), p.n, p.k, p.out_dtype))
        cand = config
    else:
        per_group, active = _group_estimate(gp, expected_rows)
        cand = tiles.candidate(p.n, p.k, p.out_dtype, gp.num_groups, per_group, active, sm_count(p.device),
                               precise_fp32, wg3, dense_ok=tiles.GROUPED_DENSE and grouped_as_ok(p))
    with building(p.device):
        return cand.plan_grouped(gp, ldc, out_aligned, precise_fp32)


def plan_swiglu_problem(gp, act_scale_ptr: int, limit: float):
    with building(gp.gemm.device):
        return tiles.SwiGLU.fallback(gp.num_groups).plan_swiglu(gp, act_scale_ptr, limit)


def swiglu_l1(xs, w1, xs_scale, w1_scale, offsets, act_ptr: int, act_scale_ptr: int, limit: float) -> None:
    """fp8gemm.moe's fused L1 on the caller's stream: act [P, I] FP8 (at ``act_ptr``, row pitch I)
    and its scales [P, I / 128] float32 (at ``act_scale_ptr``) = the SwiGLU of the contiguous
    grouped GEMM xs @ w1[g]^T (w1 [G, 2I, H]: gate rows, then up rows), requantized per 1 x 128
    group, written only for rows offsets[0] .. offsets[G] - 1. Same intake and validation as
    grouped_matmul_contiguous; I must be a multiple of 128 (fp8gemm.moe checks). Plans (tensor maps
    and argument block) are cached like matmul's, keyed by the arrays, the scales' pointer and the
    clamp; the act pointer is set per call."""
    framework = framework_of(xs)
    stream_for = output.stream_for_framework(framework)
    key = (plan_key("swiglu", framework, "float32", xs, w1, xs_scale, w1_scale, offsets)
           if framework in (CUPY, TORCH) else None)
    if key is not None:
        key = key + (act_scale_ptr, limit)             # entries: (device, plan or None for P = 0)
        entry = PLANS.get(key)
        if entry is not None:
            device, plan = entry
            if plan is not None:
                plan.run(act_ptr, stream_for(device))
            return
    ta = intake(xs, "a", stream_for)
    tb = intake(w1, "b", stream_for)
    tg = intake(offsets, "offsets", stream_for)
    tsa = intake(xs_scale, "a_scale", stream_for)
    tsb = intake(w1_scale, "b_scale", stream_for)
    gp = validate_grouped(ta, tb, tsa, tsb, tg, None, "float32", False)
    plan = None if gp.gemm.m == 0 else plan_swiglu_problem(gp, act_scale_ptr, limit)
    if key is not None:
        remember(key, (gp.gemm.device, plan))
    if plan is not None:
        plan.run(act_ptr, stream_for(gp.gemm.device))
