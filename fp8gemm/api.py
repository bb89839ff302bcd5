"""The public matmul: intake -> validate -> dispatch -> launch -> output."""
from __future__ import annotations

from . import output
from .dispatch import Candidate, GemmDesc, is_valid, select, smem_bytes_of
from .intake import framework_of, intake
from .launcher import LAUNCHERS, sm_count
from .validate import check_block_size, out_row_stride, validate_gemm


def matmul(a, b, a_scale, b_scale, *, out_dtype=None, out=None, block_size=(128, 128),
           config: Candidate | None = None):
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
        config     a dispatch.Candidate to force a kernel variant (tests and benchmarks).

    Returns the [..., N] result as the caller's kind of array (the framework of ``a``), ordered on
    the caller's current stream. M = 0 returns an empty result without a launch.
    """
    check_block_size(block_size)
    stream_for = output.stream_for_framework(framework_of(a))
    ta = intake(a, "a", stream_for)
    tb = intake(b, "b", stream_for)
    tsa = intake(a_scale, "a_scale", stream_for)
    tsb = intake(b_scale, "b_scale", stream_for)
    tout = intake(out, "out", stream_for) if out is not None else None
    problem = validate_gemm(ta, tb, tsa, tsb, tout, out_dtype)

    stream_ptr = stream_for(problem.device)
    if tout is None:
        result, out_ptr = output.allocate(ta.framework, problem.out_shape, problem.out_dtype,
                                          problem.device)
        ldc = problem.n
    else:
        result, out_ptr, ldc = out, tout.ptr, out_row_stride(tout, problem.n)
    if problem.m > 0:
        if config is None:
            cand = select(problem.m, problem.n, problem.k, problem.out_dtype,
                          num_sms=sm_count(problem.device))
        else:
            cand = config
            if not is_valid(GemmDesc(problem.m, problem.n, problem.k, problem.out_dtype), cand):
                raise ValueError(f"config {cand} is not valid for M={problem.m} N={problem.n} "
                                 f"K={problem.k} {problem.out_dtype} (see fp8gemm.dispatch)")
        LAUNCHERS[cand.variant](problem, cand, smem_bytes_of(cand, problem.out_dtype), out_ptr, ldc,
                                output.StreamRef(stream_ptr))
    if tout is not None:
        return out
    return output.finish(ta.framework, result, problem.out_shape, problem.out_dtype,
                         problem.device, stream_ptr)

