"""The classic Triton block-FP8 GEMM (the vLLM / FlagGems kernel design), written for our bench.

One program per BLOCK_M x BLOCK_N tile in grouped order; each 128-wide K step loads A and B
tiles, runs tl.dot in FP32 and multiplies by the per-row A scale and the per-column-block B
scale. No split-K, no swap-AB. The bench times a few tile configs and keeps the fastest.
"""
from __future__ import annotations

import triton
import triton.language as tl

CONFIGS = (  # (BLOCK_M, BLOCK_N, GROUP_M, num_warps, num_stages)
    (16, 128, 8, 4, 3),
    (64, 128, 8, 4, 3),
    (128, 128, 8, 8, 3),
)


@triton.jit
def _block_fp8_matmul(A, B, C, As, Bs, M, N, K,
                      stride_am, stride_ak, stride_bn, stride_bk, stride_cm, stride_cn,
                      stride_as_m, stride_as_k, stride_bs_n, stride_bs_k,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    group_m = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m

    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = A + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = B + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    as_ptrs = As + rows * stride_as_m
    bs_ptrs = Bs + (cols // 128) * stride_bs_n

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - kb * BLOCK_K
        a = tl.load(a_ptrs, mask=ks[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=ks[:, None] < k_left, other=0.0)
        sa = tl.load(as_ptrs + kb * stride_as_k)
        sb = tl.load(bs_ptrs + kb * stride_bs_k)
        acc += tl.dot(a, b) * sa[:, None] * sb[None, :]
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    out_rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    out_cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = C + out_rows[:, None] * stride_cm + out_cols[None, :] * stride_cn
    mask = (out_rows[:, None] < M) & (out_cols[None, :] < N)
    tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=mask)


def make_call(a, b, a_scale, b_scale, out, config):
    """A zero-argument launcher for torch tensors a [M, K] fp8, b [N, K] fp8, scales fp32."""
    block_m, block_n, group_m, warps, stages = config
    m, k = a.shape
    n = b.shape[0]
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)

    def call():
        _block_fp8_matmul[grid](a, b, out, a_scale, b_scale, m, n, k,
                                a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                out.stride(0), out.stride(1), a_scale.stride(0), a_scale.stride(1),
                                b_scale.stride(0), b_scale.stride(1),
                                BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=128, GROUP_M=group_m,
                                num_warps=warps, num_stages=stages)
        return out

    return call
