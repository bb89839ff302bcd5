"""Host reference of the FP8 MoE layer and of grouped GEMM: numpy float64, the definition
the GPU kernels will be tested against. No GPU code here.

Layer (DeepSeek-V4 style), for tokens x [T, H] routed to k experts each:

    out[t] = sum_j  w[t, j] * L2[e](requant(swiglu(L1[e](x[t]))))        e = ids[t, j], j = 0..k-1

* x is FP8 E4M3 with 1x128 scales [T, ceil(H/128)], or a float array quantized here with
  ``reference.quantize_per_token_group`` (what the fused GPU path does on the fly).
* L1 [E, 2I, H] FP8 with 128x128 block scales [E, ceil(2I/128), ceil(H/128)]: rows 0..I-1 are the
  gate projection, rows I..2I-1 the up projection. L2 [E, H, I] FP8, scales [E, ceil(H/128), ceil(I/128)].
* ``swiglu(h) = silu(min(gate, limit)) * clip(up, -limit, limit)`` (DeepSeek-V4's clamp, limit 10;
  ``limit=None`` disables it).
* requant: the SwiGLU output, rounded to float32, quantized per 1x128 group to FP8 E4M3
  (``reference.quantize_per_token_group``) -- the intermediate a fused kernel keeps in FP8.
* the combine adds the k weighted expert outputs of a token in slot order j = 0..k-1 (a fixed order
  keeps GPU results deterministic; the float64 reference is insensitive to it).

Grouped GEMM, the building block, in two layouts:

* contiguous (prefill): A [P, K] holds the (token, slot) rows sorted by expert, ``offsets`` [E + 1]
  with rows offsets[e]:offsets[e+1] belonging to expert e (``route`` builds both);
* masked (decode under CUDA graphs): A [E, max_rows, K] and ``counts`` [E]; rows at and past
  counts[e] of group e are not computed and read as 0 in the result.
"""
from __future__ import annotations

import numpy as np

from . import reference
from .dtypes import SWIGLU_LIMIT
from .hw import SCALE_BLOCK


def _blocks(n: int) -> int:
    return -(-n // SCALE_BLOCK)


def _check_expert_weights(name: str, w, w_scale, rows: int | None, cols: int | None):
    """w [E, rows, cols] FP8 with scales [E, ceil(rows/128), ceil(cols/128)]; returns (E, rows, cols)."""
    w = np.asarray(w)
    s = np.asarray(w_scale)
    if w.ndim != 3:
        raise ValueError(f"{name} must be [E, rows, cols]; got shape {w.shape}")
    e, r, c = w.shape
    if (rows is not None and r != rows) or (cols is not None and c != cols):
        raise ValueError(f"{name} must be [E, {rows if rows is not None else 'rows'}, "
                         f"{cols if cols is not None else 'cols'}]; got shape {w.shape}")
    if s.shape != (e, _blocks(r), _blocks(c)):
        raise ValueError(f"{name}_scale must be [E, ceil(rows/128), ceil(cols/128)] = "
                         f"{(e, _blocks(r), _blocks(c))}; got {s.shape}")
    return e, r, c


def grouped_matmul_contiguous(a, a_scale, b, b_scale, offsets):
    """C[rows of expert e] = (A * As)[rows] @ (B[e] * Bs[e])^T in float64 -> [P, N].

    a [P, K] FP8 (or bytes), a_scale [P, ceil(K/128)], b [E, N, K] FP8, b_scale [E, ceil(N/128),
    ceil(K/128)], offsets [E + 1] integers, nondecreasing, from 0 to P."""
    a = np.asarray(a)
    p, k = a.shape
    e, n, _ = _check_expert_weights("b", b, b_scale, None, k)
    off = np.asarray(offsets, dtype=np.int64)
    if off.shape != (e + 1,) or off[0] != 0 or off[-1] != p or np.any(np.diff(off) < 0):
        raise ValueError(f"offsets must be [E + 1] = [{e + 1}], nondecreasing from 0 to {p}; got {off.tolist()}")
    out = np.zeros((p, n))
    for g in range(e):
        lo, hi = int(off[g]), int(off[g + 1])
        if hi > lo:
            out[lo:hi] = reference.matmul(a[lo:hi], np.asarray(b)[g], np.asarray(a_scale)[lo:hi],
                                          np.asarray(b_scale)[g])
    return out


def grouped_matmul_masked(a, a_scale, b, b_scale, counts):
    """C[e, :counts[e]] = (A[e] * As[e])[:counts[e]] @ (B[e] * Bs[e])^T in float64; rows past
    counts[e] are 0 -> [E, max_rows, N].

    a [E, max_rows, K], a_scale [E, max_rows, ceil(K/128)], b [E, N, K], b_scale [E, ceil(N/128),
    ceil(K/128)], counts [E] integers in 0..max_rows."""
    a = np.asarray(a)
    if a.ndim != 3:
        raise ValueError(f"a must be [E, max_rows, K]; got shape {a.shape}")
    e_a, max_rows, k = a.shape
    e, n, _ = _check_expert_weights("b", b, b_scale, None, k)
    cnt = np.asarray(counts, dtype=np.int64)
    if e_a != e or cnt.shape != (e,) or np.any(cnt < 0) or np.any(cnt > max_rows):
        raise ValueError(f"a must have E = {e} groups and counts [E] values in 0..{max_rows}; got "
                         f"a {a.shape}, counts {cnt.tolist()}")
    out = np.zeros((e, max_rows, n))
    for g in range(e):
        c = int(cnt[g])
        if c:
            out[g, :c] = reference.matmul(a[g, :c], np.asarray(b)[g], np.asarray(a_scale)[g, :c],
                                          np.asarray(b_scale)[g])
    return out


def route(topk_ids, num_experts: int):
    """(tokens, slots, offsets): the (token, slot) pairs of ``topk_ids`` [T, k] sorted by expert,
    stably (token order, then slot order, within an expert), and offsets [E + 1] into that order."""
    ids = np.asarray(topk_ids)
    if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"topk_ids must be an integer [T, k] array; got {ids.dtype} {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= num_experts):
        raise ValueError(f"topk_ids must lie in 0..{num_experts - 1}; got {ids.min()}..{ids.max()}")
    t, k = ids.shape
    flat = ids.reshape(-1)
    order = np.argsort(flat, kind="stable")
    counts = np.bincount(flat, minlength=num_experts)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return order // k, order % k, offsets


def swiglu(h, limit: float | None = SWIGLU_LIMIT):
    """h [..., 2I] = [gate | up] -> silu(min(gate, limit)) * clip(up, -limit, limit), float64."""
    h = np.asarray(h, dtype=np.float64)
    i = h.shape[-1] // 2
    if h.shape[-1] != 2 * i:
        raise ValueError(f"the gate/up dimension must be even; got {h.shape[-1]}")
    gate, up = h[..., :i], h[..., i:]
    if limit is not None:
        gate = np.minimum(gate, limit)
        up = np.clip(up, -limit, limit)
    with np.errstate(over="ignore"):          # exp(-gate) -> inf for gate << 0: silu -> -0
        return gate / (1.0 + np.exp(-gate)) * up


def moe(x, topk_ids, topk_weights, w1, w1_scale, w2, w2_scale, x_scale=None,
        limit: float | None = SWIGLU_LIMIT, return_intermediates: bool = False):
    """The MoE layer in float64 (module docstring) -> out [T, H].

    x [T, H]: FP8 (or bytes) with x_scale [T, ceil(H/128)], or float (x_scale None: quantized per
    1x128 group here). topk_ids [T, k] integers in 0..E-1; topk_weights [T, k]. w1 [E, 2I, H],
    w2 [E, H, I] FP8 with 128x128 block scales. With ``return_intermediates`` also returns a dict of
    the routed order and every stage (h, act, act_q, act_scale, y) for tests of single stages.
    """
    ids = np.asarray(topk_ids)
    weights = np.asarray(topk_weights, dtype=np.float64)
    if x_scale is None:
        xq, xs = reference.quantize_per_token_group(np.asarray(x, dtype=np.float32))
    else:
        xq, xs = np.asarray(x), np.asarray(x_scale)
    t, hidden = xq.shape
    e, two_i, _ = _check_expert_weights("w1", w1, w1_scale, None, hidden)
    inter = two_i // 2
    _check_expert_weights("w2", w2, w2_scale, hidden, inter)
    if np.asarray(w2).shape[0] != e:
        raise ValueError(f"w1 and w2 must have the same number of experts; got {e} and {np.asarray(w2).shape[0]}")
    if ids.shape[0] != t or weights.shape != ids.shape:
        raise ValueError(f"topk_ids and topk_weights must both be [T, k] with T = {t}; got {ids.shape} "
                         f"and {weights.shape}")
    tokens, slots, offsets = route(ids, e)
    h = grouped_matmul_contiguous(xq[tokens], xs[tokens], w1, w1_scale, offsets)          # [P, 2I]
    act = swiglu(h, limit)
    act_q, act_scale = reference.quantize_per_token_group(act.astype(np.float32))
    y = grouped_matmul_contiguous(act_q, act_scale, w2, w2_scale, offsets)               # [P, H]
    out = np.zeros((t, hidden))
    for j in range(ids.shape[1]):                 # slot order: the combine's fixed order
        pick = slots == j
        np.add.at(out, tokens[pick], weights[tokens[pick], j][:, None] * y[pick])
    if return_intermediates:
        return out, dict(tokens=tokens, slots=slots, offsets=offsets, h=h, act=act, act_q=act_q,
                         act_scale=act_scale, y=y)
    return out
