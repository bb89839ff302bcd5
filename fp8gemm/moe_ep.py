"""Expert parallelism: the MoE layer with its experts spread over the ranks of a
``torch.distributed`` process group, the tokens exchanged through the group's own collectives.

Rank r of a group of W holds experts r * E_local .. (r + 1) * E_local - 1 (its ``w1`` / ``w2``
are those experts' weights) and its own tokens. One call:

1. quantizes x (unless x_scale is given): FP8 rows and their scales travel, not bf16;
2. dispatch: each (token, slot) pair goes to the rank owning its expert, into a fixed slot
   ``dest * C + position`` of a send buffer of C rows per destination, the pairs of one
   destination in (token, slot) order; pairs whose expert is outside 0..E-1, or past the
   capacity C, are dropped. Three ``all_to_all_single`` calls with equal splits move the rows, their
   scales and their local expert ids (-1 marks an empty row);
3. the rank's own layer (``fp8gemm.moe``) runs on the W * C received rows, each its own "token"
   with one pair of weight 1 (empty rows drop out);
4. combine: the expert outputs go back the same way, and out[t] = sum over slots j in order of
   weight[t, j] * y[t, j] in FP32, rounded once to bf16.

Every size is fixed by (T, k, C, W) and every step is a device op or a collective with equal
splits: no host sync, so the layer can be captured in a CUDA graph and replayed with new routing.
The result is deterministic for a given routing. C defaults to T * k (no pair is ever dropped);
a smaller capacity shrinks the buffers (W * C rows each way) at the risk of drops.

``local_layer`` replaces step 3 (same arguments and result as fp8gemm.moe, less
``batch_invariant``): tests run the exchange on CPU processes (gloo) with a host stand-in for the
GPU layer.

``batch_invariant`` goes to step 3's fp8gemm.moe: each received row is then computed alone, so
a token's output row is bitwise the same whatever the other tokens and their routing, as long as
none of its pairs is dropped (the default capacity drops none).
"""
from __future__ import annotations

from .dtypes import SWIGLU_LIMIT


def moe_ep(x, topk_ids, topk_weights, w1, w1_scale, w2, w2_scale, *, group=None, x_scale=None,
           limit=SWIGLU_LIMIT, capacity: int | None = None, local_layer=None, events: list | None = None,
           batch_invariant: bool | None = None):
    """One expert-parallel MoE layer on this rank's tokens -> out [T, H] bf16 (torch tensors).

    x            [T, H] bf16 / fp16 / fp32 (quantized here), or FP8 E4M3 with ``x_scale``
                 [T, ceil(H/128)] float32.
    topk_ids     [T, k] int32 / int64 global expert ids (0 .. W * E_local - 1; others dropped).
    topk_weights [T, k] float32.
    w1, w1_scale, w2, w2_scale  this rank's E_local experts, as fp8gemm.moe takes them.
    group        the torch.distributed process group (None: the default group).
    capacity     rows per destination rank (default T * k: none dropped).
    events       a list to append CUDA events to at the phases' bounds (start, after dispatch,
                 after the rank's layer, after combine), for fp8gemm.bench.moe_ep's time split.
    batch_invariant  fp8gemm.moe's, for this rank's layer (None: the process-wide mode).
    Every rank calls it with the same H, k, E_local and capacity (the collectives' sizes).
    """
    import torch
    import torch.distributed as dist

    def mark():
        if events is not None:
            events.append(torch.cuda.Event(enable_timing=True))
            events[-1].record()

    world = dist.get_world_size(group)
    t, top_k = topk_ids.shape
    mark()
    if x_scale is None:
        from .quantize import quantize_per_token_group
        x, x_scale = quantize_per_token_group(x)
    if x.dim() != 2 or x.shape[0] != t:
        raise ValueError(f"x must be [T, H] with T = {t} (topk_ids' rows); got {tuple(x.shape)}")
    if topk_weights.shape != topk_ids.shape:
        raise ValueError(f"topk_weights must have topk_ids' shape {tuple(topk_ids.shape)}; "
                         f"got {tuple(topk_weights.shape)}")
    hidden, groups_h = x.shape[1], x_scale.shape[1]
    local = w1.shape[0]
    cap = t * top_k if capacity is None else int(capacity)
    if cap < 1:
        raise ValueError(f"capacity must be >= 1; got {capacity}")
    dev = x.device
    x_bytes = x.view(torch.uint8) if x.dtype != torch.uint8 else x

    # ---- dispatch: pair p = t * k + j to rank dest[p], slot dest * C + pos[p] (trash: W * C)
    pairs = t * top_k
    expert = topk_ids.reshape(-1).to(torch.int64)
    valid = (expert >= 0) & (expert < world * local)
    dest = torch.where(valid, expert // local, torch.full_like(expert, world))
    order = torch.sort(dest, stable=True).indices                   # by destination, pair order kept
    dest_sorted = dest[order]
    counts = torch.zeros(world + 1, dtype=torch.int64, device=dev).scatter_add_(
        0, dest_sorted, torch.ones_like(dest_sorted))
    starts = torch.cumsum(counts, 0) - counts
    pos_sorted = torch.arange(pairs, device=dev) - starts[dest_sorted]
    keep = (dest_sorted < world) & (pos_sorted < cap)
    slot_sorted = torch.where(keep, dest_sorted * cap + pos_sorted, torch.full_like(pos_sorted, world * cap))
    slot = torch.empty_like(slot_sorted).scatter_(0, order, slot_sorted)    # per pair, in pair order
    token = torch.arange(pairs, device=dev) // top_k

    send_x = torch.zeros(world * cap + 1, hidden, dtype=torch.uint8, device=dev)
    send_s = torch.zeros(world * cap + 1, groups_h, dtype=torch.float32, device=dev)
    send_e = torch.full((world * cap + 1,), -1, dtype=torch.int32, device=dev)
    send_x[slot] = x_bytes[token]
    send_s[slot] = x_scale[token]
    # dropped pairs all land in the trash row with -1 (no host scalar: capturable in a CUDA graph)
    routed = valid & (slot < world * cap)
    send_e[slot] = torch.where(routed, expert % local, torch.full_like(expert, -1)).to(torch.int32)
    recv_x = torch.empty(world * cap, hidden, dtype=torch.uint8, device=dev)
    recv_s = torch.empty(world * cap, groups_h, dtype=torch.float32, device=dev)
    recv_e = torch.empty(world * cap, dtype=torch.int32, device=dev)
    dist.all_to_all_single(recv_x, send_x[:world * cap].contiguous(), group=group)
    dist.all_to_all_single(recv_s, send_s[:world * cap].contiguous(), group=group)
    dist.all_to_all_single(recv_e, send_e[:world * cap].contiguous(), group=group)
    mark()

    # ---- this rank's experts on every received row (one pair each, weight 1; -1: dropped)
    mode = {}
    layer = local_layer
    if layer is None:
        from .moe_layer import moe as layer
        mode = {"batch_invariant": batch_invariant}
    ones = torch.ones(world * cap, 1, dtype=torch.float32, device=dev)
    rows = recv_x.view(torch.float8_e4m3fn) if recv_x.is_cuda else recv_x
    y = layer(rows, recv_e.view(-1, 1), ones, w1, w1_scale, w2, w2_scale, x_scale=recv_s, limit=limit, **mode)
    mark()

    # ---- combine: the outputs back to their source ranks, summed in slot order in FP32
    back = torch.empty(world * cap, hidden, dtype=torch.bfloat16, device=dev)
    dist.all_to_all_single(back, y.contiguous(), group=group)
    back = torch.cat([back, torch.zeros(1, hidden, dtype=torch.bfloat16, device=dev)])   # the trash slot: 0
    y_pair = back[slot].float().view(t, top_k, hidden)
    w = topk_weights.to(torch.float32)
    acc = torch.zeros(t, hidden, dtype=torch.float32, device=dev)
    for j in range(top_k):                                            # slot order: deterministic
        acc = torch.addcmul(acc, w[:, j, None], y_pair[:, j])
    out = acc.to(torch.bfloat16)
    mark()
    return out
