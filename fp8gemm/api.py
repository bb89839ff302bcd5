"""The public matmul: intake -> validate -> dispatch -> launch -> output."""
from __future__ import annotations

from . import output, plans
from .dispatch import Candidate, Dense, GemmDesc, is_valid, select
from .dispatch.dense import scales_ok as dense_scales_ok
from .dispatch.selector import fallback
from .dispatch import invariant as invariant_mode
from .intake import CUPY, TORCH, framework_of, intake
from .launcher import building, gpu_key, sm_count
from .plans import PLANS, execute, plan_key, remember
from .validate import check_block_size, out_row_stride, validate_gemm


def matmul(a, b, a_scale, b_scale, *, out_dtype=None, out=None, block_size=(128, 128),
           config: Candidate | None = None, batch_invariant: bool | None = None):
    """W8A8 block-FP8 GEMM: ``C = (a * a_scale) @ (b * b_scale).T`` with FP32 accumulation.

    Requirements:
        a        [..., K] FP8 E4M3 (torch/JAX float8_e4m3fn, or uint8/int8 bytes), K-contiguous,
                 K a positive multiple of 16, rows 16-byte aligned.
        b        [N, K] FP8 E4M3, K-contiguous, rows 16-byte aligned.
        a_scale  [..., ceil(K/128)] float32, one scale per token per 128-wide K group; any strides
                 (row-major or M-major are read in place).
        b_scale  [ceil(N/128), ceil(K/128)] float32, one scale per 128x128 block of b; any strides.
        All on the same GPU, from CuPy, PyTorch or JAX (or any DLPack producer).

    Arguments:
        out_dtype  "bfloat16" (default), "float16" or "float32" (or a framework dtype).
        out        optional [..., N] array to write into (CuPy or torch; unit stride along N).
        block_size must be (128, 128).
        config     a variant's descriptor (fp8gemm.dispatch: General, SwapAB, ShortK, Gemv,
                   Wg3, Dense) to force a kernel and its knobs (tests and benchmarks).
        batch_invariant  True: each row of the result is bitwise the same for every M (one kernel
                   and its knobs chosen by N, K and out dtype alone: dispatch/invariant.py); None:
                   the process-wide mode (fp8gemm.set_batch_invariant, $FP8GEMM_BATCH_INVARIANT=1),
                   which a forced config= overrides; True with config= is refused.

    Returns the [..., N] result as the caller's kind of array (the framework of ``a``), ordered on
    the caller's current stream. M = 0 returns an empty result without a launch.
    """
    if type(block_size) is not tuple or block_size != (128, 128):
        check_block_size(block_size)
    if config is not None and batch_invariant:
        raise ValueError("batch_invariant=True chooses the kernel itself; it cannot take a forced config= "
                         "(fp8gemm.explain(M, N, K, batch_invariant=True) names the mode's kernel)")
    invariant = invariant_mode.ENABLED if batch_invariant is None and config is None else bool(batch_invariant)
    tag = "matmul_bi" if invariant else "matmul"     # the mode's plans apart from the default's
    cls = plans.cupy_ndarray
    if (type(a) is cls and type(b) is cls and type(a_scale) is cls and type(b_scale) is cls
            and out is None and config is None and (out_dtype is None or type(out_dtype) is str)):
        # The CuPy fast path: the key plan_key builds (tagged ``tag``), as one literal.
        entry = PLANS.get((tag, CUPY, out_dtype, a.data.ptr, a.shape, a.strides, a.dtype,
                            b.data.ptr, b.shape, b.strides, b.dtype,
                            a_scale.data.ptr, a_scale.shape, a_scale.strides, a_scale.dtype,
                            b_scale.data.ptr, b_scale.shape, b_scale.strides, b_scale.dtype))
        if entry is not None and entry[1] is not None:
            problem, runner = entry[0], entry[1]
            cuda = output.cupy_cuda()
            if cuda.runtime.getDevice() == problem.device:
                result = cls(problem.out_shape, output.NP_DTYPES[problem.out_dtype])
                runner.run(result.data.ptr, cuda.get_current_stream(problem.device).ptr)
                return result
    framework = framework_of(a)
    stream_for = output.stream_for_framework(framework)

    # Fast path: the same inputs (pointers, shapes, strides, dtypes, devices; and the same out=
    # array, if any) as an earlier call reuse its validated problem and launch plan; only the
    # stream (and a fresh output) are new.
    key = None
    if config is None and framework in (CUPY, TORCH):
        if out is None:
            key = plan_key(tag, framework, out_dtype, a, b, a_scale, b_scale)
        else:
            key = plan_key(tag, framework, out_dtype, a, b, a_scale, b_scale, out)
        entry = PLANS.get(key) if key is not None else None
        if entry is not None:
            problem, runner, out_ptr = entry
            if out is None:
                return execute(framework, stream_for, problem, runner, None, None)
            if runner is not None:
                runner.run(out_ptr, stream_for(problem.device))
            return out

    ta = intake(a, "a", stream_for)
    tb = intake(b, "b", stream_for)
    tsa = intake(a_scale, "a_scale", stream_for)
    tsb = intake(b_scale, "b_scale", stream_for)
    tout = intake(out, "out", stream_for) if out is not None else None
    problem = validate_gemm(ta, tb, tsa, tsb, tout, out_dtype)

    if tout is None:
        ldc, aligned = problem.n, True          # fresh allocations are at least 256-byte aligned
    else:
        ldc, aligned = out_row_stride(tout, problem.n) if problem.m > 0 else problem.n, tout.ptr % 16 == 0
    runner = plan_problem(problem, config, ldc, aligned, invariant)
    if key is not None:
        remember(key, (problem, runner, None if tout is None else tout.ptr))
    return execute(ta.framework, stream_for, problem, runner, tout, out)


def plan_problem(problem, config: Candidate | None, ldc: int, out_aligned: bool, batch_invariant: bool = False):
    """Stages 3 and 4 for a validated problem: the dispatcher's kernel (or ``config``, checked;
    or with ``batch_invariant`` the mode's, mode_candidate) and its launch plan; None for
    M = 0 (nothing to launch). Shared by matmul and the JAX FFI handler (fp8gemm/jax.py)."""
    if problem.m == 0:
        return None
    if config is None and batch_invariant:
        cand = invariant_mode.mode_candidate(problem.m, problem.n, problem.k, problem.out_dtype,
                                             gpu=gpu_key(problem.device), device_sms=sm_count(problem.device))
        if isinstance(cand, Dense) and not dense_scales_ok(problem):
            # an As the dense kernel's TMA cannot read: the mode's own tile (never the default's fallback)
            cand = invariant_mode.invariant_candidate(problem.n, problem.k, problem.out_dtype)
    elif config is None:
        cand = select(problem.m, problem.n, problem.k, problem.out_dtype, gpu=gpu_key(problem.device),
                      num_sms=sm_count(problem.device))
        if isinstance(cand, Dense) and not dense_scales_ok(problem):
            # the table's (or the model's) dense kernel reads As by TMA; this caller's As is neither TMA-readable
            # layout (a broadcast, an odd stride, K / 128 not a multiple of 4): the other kernels' model
            cand = fallback(GemmDesc(problem.m, problem.n, problem.k, problem.out_dtype), sm_count(problem.device),
                            dense=False)
    else:
        cand = config
        if not is_valid(GemmDesc(problem.m, problem.n, problem.k, problem.out_dtype), cand):
            raise ValueError(f"config {cand} is not valid for M={problem.m} N={problem.n} "
                             f"K={problem.k} {problem.out_dtype} (see fp8gemm.dispatch)")
    with building(problem.device):
        return cand.plan(problem, ldc, out_aligned)
