"""GPU tests of the MoE layer (fp8gemm.moe) against the float64 reference of the whole layer
(fp8gemm.moe_reference.moe): uniform and skewed routing (empty experts, every token on the same
experts), FP8 or bf16 input, torch, CuPy and JAX callers, CUDA graphs, dropped pairs, bitwise
reproducibility, and the fused SwiGLU L1 against the unfused chain: bit for bit where the
chain's L1 does not split K, within the bound where it does.

The bound: the reference requantizes the float64 SwiGLU output to FP8; we requantize an FP32 one
(L1 in FP32 promoted per 128-K block, precise_fp32=False: ~2e-4 relative), which lands on another
FP8 code for about 2e-4 / 2^-4 ~ 3e-3 of the elements (one code step, <= 12.5% of that element,
~2.5e-3 of Frobenius error). The rest is the bf16 rounding of y and of the output (2^-9 each) and
the FP8 GEMMs' own ~2e-4: a relative Frobenius error of a few 1e-3, well inside the 1e-2 asked
for."""
import numpy as np
import pytest

import fp8gemm
from fp8gemm import moe_reference, reference

pytestmark = pytest.mark.gpu
MOE_TOL = 1e-2


def layer(experts, hidden, inter, seed):
    """Expert weights quantized per 128 x 128 block, scaled so that h and y are about 1-5."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((experts, 2 * inter, hidden)).astype(np.float32) * (3.0 / np.sqrt(hidden))
    w2 = rng.standard_normal((experts, hidden, inter)).astype(np.float32) * (0.3 / np.sqrt(inter))
    q1, s1 = zip(*(reference.quantize_per_block(w) for w in w1))
    q2, s2 = zip(*(reference.quantize_per_block(w) for w in w2))
    return np.stack(q1), np.stack(s1), np.stack(q2), np.stack(s2)


def routing(tokens, experts, top_k, skewed, seed):
    rng = np.random.default_rng(seed + 1)
    if skewed:      # every token on the same top-k experts: the others stay empty
        ids = np.tile(np.arange(3, 3 + top_k) % experts, (tokens, 1))
    else:
        ids = np.stack([rng.choice(experts, top_k, replace=False) for _ in range(tokens)]).reshape(tokens, top_k)
    w = rng.random((tokens, top_k)).astype(np.float32) + 0.1
    return ids.astype(np.int32), (w / w.sum(axis=1, keepdims=True)).astype(np.float32)


def on_gpu(a):
    import torch
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def torch_args(xq, ids, w, q1, s1, q2, s2):
    """fp8gemm.moe's positional arguments as torch tensors on the GPU (FP8 as float8_e4m3fn)."""
    import torch
    fp8 = torch.float8_e4m3fn
    return (on_gpu(xq.view(np.uint8)).view(fp8), on_gpu(ids), on_gpu(w), on_gpu(q1.view(np.uint8)).view(fp8),
            on_gpu(s1), on_gpu(q2.view(np.uint8)).view(fp8), on_gpu(s2))


def rel_err(got, want):
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def to_f64(x):
    import cupy
    if hasattr(x, "cpu"):
        return x.float().cpu().numpy().astype(np.float64)
    return (cupy.asarray(x).view(cupy.uint16).astype(cupy.uint32) << 16).view(cupy.float32).get().astype(np.float64)


@pytest.mark.parametrize("skewed", [False, True], ids=["uniform", "skewed"])
@pytest.mark.parametrize("tokens,top_k", [(1, 2), (7, 6), (64, 6), (300, 4)], ids=str)
@pytest.mark.parametrize("fp8_input", [True, False], ids=["fp8_x", "bf16_x"])
def test_layer_matches_reference_torch(tokens, top_k, skewed, fp8_input):
    import torch
    experts, hidden, inter = 8, 384, 256
    q1, s1, q2, s2 = layer(experts, hidden, inter, seed=tokens)
    ids, w = routing(tokens, experts, top_k, skewed, seed=tokens)
    x = np.random.default_rng(tokens + 7).standard_normal((tokens, hidden)).astype(np.float32)
    x_bf16 = torch.from_numpy(x).to(torch.bfloat16)
    xq, xs = reference.quantize_per_token_group(x_bf16.float().numpy())
    fp8 = torch.float8_e4m3fn

    def dev(a):
        return torch.from_numpy(np.ascontiguousarray(a)).cuda()
    w1, w2 = dev(q1.view(np.uint8)).view(fp8), dev(q2.view(np.uint8)).view(fp8)
    ids64 = dev(ids.astype(np.int64))                  # torch.topk's dtype: converted inside
    if fp8_input:
        out = fp8gemm.moe(dev(xq.view(np.uint8)).view(fp8), ids64, dev(w), w1, dev(s1), w2, dev(s2), x_scale=dev(xs))
    else:
        out = fp8gemm.moe(x_bf16.cuda(), ids64, dev(w), w1, dev(s1), w2, dev(s2))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and out.shape == (tokens, hidden)
    want = moe_reference.moe(xq, ids, w, q1, s1, q2, s2, x_scale=xs)
    got = to_f64(out)
    assert np.isfinite(got).all()
    assert np.abs(want).max() > 0.1, "degenerate case"
    err = rel_err(got, want)
    print(f"moe T={tokens} k={top_k} skewed={skewed} fp8_x={fp8_input}: relative Frobenius error {err:.2e}")
    assert err <= MOE_TOL, f"relative Frobenius error {err:.3e} > {MOE_TOL}"
    assert reference.calc_diff(got, want) <= 1e-4


def test_cupy_caller_reproducible_and_dropped_pairs():
    """CuPy arrays in, CuPy bf16 out; two runs agree bit for bit (the rows' order inside an
    expert comes from atomics, the sums do not); an id of -1 or >= E drops that pair."""
    import cupy
    experts, hidden, inter, tokens, top_k = 16, 256, 128, 50, 4
    q1, s1, q2, s2 = layer(experts, hidden, inter, seed=3)
    ids, w = routing(tokens, experts, top_k, False, seed=3)
    x = np.random.default_rng(4).standard_normal((tokens, hidden)).astype(np.float32)
    xq, xs = reference.quantize_per_token_group(x)
    args = [cupy.asarray(a) for a in (xq.view(np.uint8), ids, w, q1.view(np.uint8), s1, q2.view(np.uint8), s2, xs)]
    first = fp8gemm.moe(*args[:7], x_scale=args[7])
    second = fp8gemm.moe(*args[:7], x_scale=args[7])
    assert bool((first.view(cupy.uint16) == second.view(cupy.uint16)).all()), "not reproducible"
    dropped = ids.copy()
    dropped[::3, 1] = -1
    dropped[1::5, 0] = experts
    args[1] = cupy.asarray(dropped)
    got = to_f64(fp8gemm.moe(*args[:7], x_scale=args[7]))
    keep = (dropped >= 0) & (dropped < experts)
    want = moe_reference.moe(xq, np.where(keep, dropped, 0), np.where(keep, w, 0), q1, s1, q2, s2, x_scale=xs)
    assert rel_err(got, want) <= MOE_TOL


@pytest.mark.parametrize("tokens,top_k,skewed,inter,limit", [
    (1, 2, False, 256, 10.0),       # fewer rows than a tile, most experts empty
    (37, 6, False, 384, 10.0),      # 3 act groups, tiles cut by group ends
    (300, 4, True, 256, 10.0),      # all rows on 4 experts: several row tiles each
    (300, 4, False, 256, 0.75),     # a clamp that bites on most values
    (200, 3, False, 128, None),     # one act group, no clamp
], ids=str)
def test_fused_swiglu_matches_unfused_bit_for_bit(tokens, top_k, skewed, inter, limit):
    """The fused L1 (SwiGLU and requantization in the GEMM's epilogue) computes the same FP32
    values as the unfused L1 and quantizes them with the same operations: the layer's output
    must be identical bit for bit, and (through the unfused path) within the reference bound.
    Decode-sized and prefill-sized routings, 1-3 act groups, clamps that bite or none. (H = 384
    is 3 K blocks: the chain's L1 never splits K here; the split cases are the next test.)"""
    import torch
    experts, hidden = 8, 384
    q1, s1, q2, s2 = layer(experts, hidden, inter, seed=tokens + inter)
    ids, w = routing(tokens, experts, top_k, skewed, seed=tokens)
    x = np.random.default_rng(tokens + 11).standard_normal((tokens, hidden)).astype(np.float32)
    xq, xs = reference.quantize_per_token_group(x)
    dev = on_gpu
    args = torch_args(xq, ids, w, q1, s1, q2, s2)
    fused = fp8gemm.moe(*args, x_scale=dev(xs), limit=limit, fused=True)
    unfused = fp8gemm.moe(*args, x_scale=dev(xs), limit=limit, fused=False)
    torch.cuda.synchronize()
    want = moe_reference.moe(xq, ids, w, q1, s1, q2, s2, x_scale=xs, limit=limit)
    assert np.abs(want).max() > 0.1, "degenerate case"
    assert rel_err(to_f64(unfused), want) <= MOE_TOL
    same = fused.view(torch.int16) == unfused.view(torch.int16)
    assert bool(same.all()), f"fused differs from unfused in {int((~same).sum())} of {same.numel()} outputs"
    # New tokens and routing in the same buffers: the fused L1's cached plan (keyed by pointers)
    # must read the new data.
    ids2, w2 = routing(tokens, experts, top_k, not skewed, seed=tokens + 5)
    x2 = np.random.default_rng(tokens + 12).standard_normal((tokens, hidden)).astype(np.float32)
    xq2, xs2 = reference.quantize_per_token_group(x2)
    args[0].view(torch.uint8).copy_(dev(xq2.view(np.uint8)))
    args[1].copy_(dev(ids2))
    args[2].copy_(dev(w2))
    xs_dev = dev(xs2)
    fused2 = fp8gemm.moe(*args, x_scale=xs_dev, limit=limit, fused=True)
    unfused2 = fp8gemm.moe(*args, x_scale=xs_dev, limit=limit, fused=False)
    torch.cuda.synchronize()
    want2 = moe_reference.moe(xq2, ids2, w2, q1, s1, q2, s2, x_scale=xs2, limit=limit)
    assert rel_err(to_f64(fused2), want2) <= MOE_TOL
    assert bool((fused2.view(torch.int16) == unfused2.view(torch.int16)).all())


@pytest.mark.parametrize("experts,inter,tokens,top_k", [
    (8, 256, 4, 2),       # 8 experts x 4 weight tiles: a fixed K split of every tile
    (16, 1024, 2, 6),     # about 12 experts x 16 tiles, ~1.45 waves: the last wave's tiles split
], ids=str)
def test_chain_l1_split_k_within_bound_and_unsplit_matches_fused(monkeypatch, experts, inter, tokens, top_k):
    """Where the chain's L1 splits K (decode sizes with K >= 16 blocks), its FP32 partial sums add
    in another order than the fused L1's, which never splits: both layers stay within the
    reference bound and each is bitwise reproducible, but they need not agree bit for bit. With
    the grouped K splits turned off (and the plan cache cleared on both sides), the chain is bit
    for bit the fused layer again: the split is the only difference between the two paths."""
    import cupy
    import torch

    from fp8gemm import plans
    from fp8gemm.dispatch import grouped as rules
    from fp8gemm.grouped import rows_estimate
    hidden = 2048
    per, active = rows_estimate(tokens * top_k, experts)
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    chosen = rules.candidate(2 * inter, hidden, "float32", experts, per, active, sms, False)
    assert getattr(chosen, "splits", 1) != 1, f"the case must split the chain's L1: {chosen.label()}"
    q1, s1, q2, s2 = layer(experts, hidden, inter, seed=inter + tokens)
    ids, w = routing(tokens, experts, top_k, False, seed=tokens + experts)
    x = np.random.default_rng(tokens + 3).standard_normal((tokens, hidden)).astype(np.float32)
    xq, xs = reference.quantize_per_token_group(x)
    dev = on_gpu
    args = torch_args(xq, ids, w, q1, s1, q2, s2)
    xs_dev = dev(xs)
    want = moe_reference.moe(xq, ids, w, q1, s1, q2, s2, x_scale=xs)
    fused = fp8gemm.moe(*args, x_scale=xs_dev, fused=True)
    split = fp8gemm.moe(*args, x_scale=xs_dev, fused=False)
    split_again = fp8gemm.moe(*args, x_scale=xs_dev, fused=False)
    torch.cuda.synchronize()
    assert np.abs(want).max() > 0.1, "degenerate case"
    assert rel_err(to_f64(fused), want) <= MOE_TOL
    assert rel_err(to_f64(split), want) <= MOE_TOL
    assert bool((split.view(torch.int16) == split_again.view(torch.int16)).all()), "the split chain is not reproducible"
    plans.PLANS.clear()
    monkeypatch.setattr(rules, "split_count", lambda *a: 1)
    monkeypatch.setattr(rules, "tail_split_pays", lambda *a: False)
    try:
        unsplit = fp8gemm.moe(*args, x_scale=xs_dev, fused=False)
        torch.cuda.synchronize()
    finally:
        monkeypatch.undo()
        plans.PLANS.clear()
    same = unsplit.view(torch.int16) == fused.view(torch.int16)
    assert bool(same.all()), f"unsplit chain differs from fused in {int((~same).sum())} of {same.numel()} outputs"


def test_bad_layer_input():
    import cupy
    q1, s1, q2, s2 = layer(4, 256, 128, seed=1)
    x = cupy.zeros((3, 256), dtype=cupy.float32)
    ids, w = cupy.zeros((3, 2), dtype=cupy.int32), cupy.full((3, 2), 0.5, dtype=cupy.float32)
    w1, w2 = cupy.asarray(q1.view(np.uint8)), cupy.asarray(q2.view(np.uint8))
    with pytest.raises(ValueError, match="topk_weights must have topk_ids' shape"):
        fp8gemm.moe(x, ids, w[:, :1], w1, cupy.asarray(s1), w2, cupy.asarray(s2))
    with pytest.raises(TypeError, match="topk_ids must be int32 or int64"):
        fp8gemm.moe(x, w, w, w1, cupy.asarray(s1), w2, cupy.asarray(s2))
    with pytest.raises(ValueError, match=r"w2 must be \[E, H, I\]"):
        fp8gemm.moe(x, ids, w, w1, cupy.asarray(s1), w2[:, :128], cupy.asarray(s2))
    empty = fp8gemm.moe(x[:0], ids[:0], w[:0], w1, cupy.asarray(s1), w2, cupy.asarray(s2))
    assert empty.shape == (0, 256)


def test_jax_caller():
    """JAX arrays in (FP8 x as float8_e4m3fn, bf16 x quantized inside), a JAX bf16 array out."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    experts, hidden, inter, tokens, top_k = 8, 256, 128, 9, 3
    q1, s1, q2, s2 = layer(experts, hidden, inter, seed=5)
    ids, w = routing(tokens, experts, top_k, False, seed=5)
    x = np.random.default_rng(6).standard_normal((tokens, hidden)).astype(np.float32)
    xq, xs = reference.quantize_per_token_group(x)
    f8 = jnp.float8_e4m3fn
    weights = (jnp.asarray(q1.view(np.uint8)).view(f8), jnp.asarray(s1), jnp.asarray(q2.view(np.uint8)).view(f8),
               jnp.asarray(s2))
    want = moe_reference.moe(xq, ids, w, q1, s1, q2, s2, x_scale=xs)
    out = fp8gemm.moe(jnp.asarray(xq.view(np.uint8)).view(f8), jnp.asarray(ids), jnp.asarray(w), *weights,
                      x_scale=jnp.asarray(xs))
    assert isinstance(out, jax.Array) and out.dtype == jnp.bfloat16 and out.shape == (tokens, hidden)
    got = np.asarray(out.astype(jnp.float32), dtype=np.float64)
    assert np.abs(want).max() > 0.1 and rel_err(got, want) <= MOE_TOL
    x_bf16 = jnp.asarray(x).astype(jnp.bfloat16)
    out_bf16 = fp8gemm.moe(x_bf16, jnp.asarray(ids), jnp.asarray(w), *weights)
    # The reference takes the bf16-rounded x the layer saw (rounding x to bf16 alone moves this
    # layer's output by ~3e-2 through the FP8 quantization: not the error under test).
    want_bf16 = moe_reference.moe(np.asarray(x_bf16.astype(jnp.float32)), ids, w, q1, s1, q2, s2)
    assert rel_err(np.asarray(out_bf16.astype(jnp.float32), dtype=np.float64), want_bf16) <= MOE_TOL


def torch_layer(experts, hidden, inter, seed):
    """layer()'s host arrays, and (w1, w1_scale, w2, w2_scale) as torch CUDA tensors."""
    import torch
    q1, s1, q2, s2 = layer(experts, hidden, inter, seed)

    def dev(a):
        return torch.from_numpy(np.ascontiguousarray(a)).cuda()
    fp8 = torch.float8_e4m3fn
    return (q1, s1, q2, s2), (dev(q1.view(np.uint8)).view(fp8), dev(s1), dev(q2.view(np.uint8)).view(fp8), dev(s2))


def capture_layer(x, ids, w, weights, before_capture=None):
    """(out, replay): fp8gemm.moe captured in a torch.cuda.graph after a warm-up call on buffers
    holding x, ids, w; replay(x, ids, w) copies new inputs into them, replays and synchronizes."""
    import torch
    x_buf = torch.from_numpy(x).to(torch.bfloat16).cuda()
    ids_buf, w_buf = torch.from_numpy(ids).cuda(), torch.from_numpy(w).cuda()
    fp8gemm.moe(x_buf, ids_buf, w_buf, *weights)            # warm-up: compile, plans
    torch.cuda.synchronize()
    if before_capture is not None:
        before_capture()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fp8gemm.moe(x_buf, ids_buf, w_buf, *weights)

    def replay(x, ids, w):
        x_buf.copy_(torch.from_numpy(x).to(torch.bfloat16))
        ids_buf.copy_(torch.from_numpy(ids))
        w_buf.copy_(torch.from_numpy(w))
        graph.replay()
        torch.cuda.synchronize()
    return out, replay


def two_routings(tokens, experts, top_k, hidden, seed):
    """[(x, ids, w)] of a uniform routing (seed) and a skewed one (seed + 1)."""
    cases = []
    for s in (seed, seed + 1):
        ids, w = routing(tokens, experts, top_k, s == seed + 1, seed=s)
        cases.append((np.random.default_rng(s + 10).standard_normal((tokens, hidden)).astype(np.float32), ids, w))
    return cases


def check_replays(out, replay, cases, host_weights):
    """Replay the captured layer on each case (last first) and check ``out`` against the float64 layer."""
    import torch
    for x, ids, w in reversed(cases):
        replay(x, ids, w)
        xb = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
        assert rel_err(to_f64(out), moe_reference.moe(xb, ids, w, *host_weights)) <= MOE_TOL


def test_torch_cuda_graph_replays_new_routing():
    """Captured in torch.cuda.graph after a warm-up call (kernels loaded, intermediates from the
    graph's pool), replayed with new x, ids and weights copied into the same buffers."""
    experts, hidden, inter, tokens, top_k = 8, 256, 128, 6, 2
    (q1, s1, q2, s2), weights = torch_layer(experts, hidden, inter, seed=8)
    cases = two_routings(tokens, experts, top_k, hidden, 8)
    out, replay = capture_layer(*cases[0], weights)
    check_replays(out, replay, cases, (q1, s1, q2, s2))


def test_default_fuses_in_its_window_and_replays_in_a_graph():
    """fused=None in FUSED_ROWS (here 48 tokens x top-2 over 8 experts: an estimate of 24 rows):
    the layer runs the fused L1, bit for bit the chain, and captured in a graph it replays new
    routing within the reference bound."""
    import torch
    from fp8gemm.dispatch import grouped
    from fp8gemm.grouped import rows_estimate
    experts, hidden, inter, tokens, top_k = 8, 256, 128, 48, 2
    assert grouped.fused_default(rows_estimate(tokens * top_k, experts)[0])
    (q1, s1, q2, s2), weights = torch_layer(experts, hidden, inter, seed=12)
    cases = two_routings(tokens, experts, top_k, hidden, 12)
    x0 = torch.from_numpy(cases[0][0]).to(torch.bfloat16).cuda()
    ids0, w0 = torch.from_numpy(cases[0][1]).cuda(), torch.from_numpy(cases[0][2]).cuda()
    default = fp8gemm.moe(x0, ids0, w0, *weights)
    chain = fp8gemm.moe(x0, ids0, w0, *weights, fused=False)
    assert bool((default.view(torch.int16) == chain.view(torch.int16)).all())
    out, replay = capture_layer(*cases[0], weights)
    check_replays(out, replay, cases, (q1, s1, q2, s2))


def _cost_two(c):
    """moe_glue.cu's choice_costs, restated: the two-warpgroup kernel's 128-row tiles."""
    return 0.0 if c == 0 else c // 128 + (0.0 if c % 128 == 0 else (0.75 if c > 128 else 1.0))


def _cost_three(c):
    return 0.0 if c == 0 else 1.06 if c <= 128 else 1.45 if c <= 192 else 1.55 * -(-c // 192)


def _three(c):
    """The routing kernel's class of an expert with c rows: the three-warpgroup kernel's cost lower."""
    return _cost_three(c) < _cost_two(c)


def ids_with_counts(counts, tokens, top_k, seed):
    """[tokens, top_k] distinct expert ids per token with exactly ``counts`` pairs per expert (each
    token takes the top_k experts with the most pairs left), the slots then shuffled per token."""
    left = np.array(counts, dtype=np.int64)
    assert left.sum() == tokens * top_k
    ids = np.empty((tokens, top_k), dtype=np.int32)
    rng = np.random.default_rng(seed)
    for t in range(tokens):
        pick = np.argsort(-left, kind="stable")[:top_k]
        assert (left[pick] > 0).all()
        left[pick] -= 1
        ids[t] = rng.permutation(pick)
    return ids


def test_device_choice_of_grouped_kernel(monkeypatch):
    """At about 100-225 rows per expert (dispatch/grouped.py: MOE_CHOICE_ROWS) the routing kernel
    gives each expert, from its real count, the grouped kernel of lower cost: both kernels launch
    for L1 and for L2, each with its experts' rows (the two-warpgroup kernel's experts first, then
    the three-warpgroup kernel's, one contiguous run each) and every other expert empty. Uniform
    counts of ~150 all take the three-warpgroup kernel, four experts of 300 the two-warpgroup one,
    and counts of 300, 160 and 70 split between them in one call; a captured graph replayed with
    the other routings follows the data; outputs match the reference."""
    import torch

    from fp8gemm import moe_layer
    calls = []
    real = moe_layer.run_grouped

    def spy(*args, **kw):
        calls.append((args[4], args[12]))          # the offsets row, wg3
        return real(*args, **kw)
    monkeypatch.setattr(moe_layer, "run_grouped", spy)
    experts, hidden, inter, tokens, top_k = 8, 384, 256, 300, 4
    (q1, s1, q2, s2), weights = torch_layer(experts, hidden, inter, seed=21)
    cases = []
    for skewed in (False, True):
        ids, w = routing(tokens, experts, top_k, skewed, seed=21)
        cases.append((ids, w))
    mixed = ids_with_counts([300, 300, 160, 160, 70, 70, 70, 70], tokens, top_k, seed=23)
    cases.append((mixed, routing(tokens, experts, top_k, False, seed=23)[1]))
    classes = []
    for i, (ids, w) in enumerate(cases):
        counts = np.bincount(ids.reshape(-1), minlength=experts)
        classes.append([_three(c) for c in counts])
        x = np.random.default_rng(22 + i).standard_normal((tokens, hidden)).astype(np.float32)
        cases[i] = (x, ids, w, counts)
    assert all(classes[0]) and not any(c for c, n in zip(classes[1], cases[1][3]) if n)   # uniform, skewed
    assert any(classes[2]) and not all(classes[2])                                       # mixed: both

    def check(out, x, ids, w, counts, launches):
        torch.cuda.synchronize()
        assert len(launches) == 4                             # L1 and L2, each on both kernels
        three = [_three(c) for c in counts]
        rows_two = int(sum(c for c, t in zip(counts, three) if not t))
        for offsets, wg3 in launches:
            off = offsets.cpu().numpy().astype(np.int64) if hasattr(offsets, "cpu") else np.asarray(offsets.get())
            sizes = np.diff(off)
            want = [c if t == bool(wg3) else 0 for c, t in zip(counts, three)]
            assert sizes.tolist() == want, (wg3, off.tolist(), counts.tolist())
            assert off[0] == (rows_two if wg3 else 0) and off[-1] == (counts.sum() if wg3 else rows_two)
        xb = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
        assert rel_err(to_f64(out), moe_reference.moe(xb, ids, w, q1, s1, q2, s2)) <= MOE_TOL

    for x, ids, w, counts in cases:                          # eager
        calls.clear()
        out = fp8gemm.moe(torch.from_numpy(x).to(torch.bfloat16).cuda(), torch.from_numpy(ids).cuda(),
                          torch.from_numpy(w).cuda(), *weights)
        check(out, x, ids, w, counts, list(calls))
    out, replay = capture_layer(*cases[0][:3], weights, before_capture=calls.clear)
    captured = list(calls)[-4:]                              # the captured call's launches
    for x, ids, w, counts in reversed(cases):                # graph: the choice follows the data
        replay(x, ids, w)
        check(out, x, ids, w, counts, captured)


def test_out_param_writes_every_row_and_checks_the_array():
    """out= [T, H] bf16: the same bits as a fresh result, returned as given (poisoned first: every
    row written); a wrong shape, dtype or a strided view is refused."""
    import torch
    experts, hidden, inter, tokens = 8, 256, 128, 33
    _, weights = torch_layer(experts, hidden, inter, seed=12)
    ids, w = routing(tokens, experts, 2, False, seed=12)
    x = torch.from_numpy(np.random.default_rng(12).standard_normal((tokens, hidden)).astype(np.float32))
    x, ids, w = x.to(torch.bfloat16).cuda(), torch.from_numpy(ids).cuda(), torch.from_numpy(w).cuda()
    want = fp8gemm.moe(x, ids, w, *weights)
    out = torch.full((tokens, hidden), float("nan"), dtype=torch.bfloat16, device="cuda")
    assert fp8gemm.moe(x, ids, w, *weights, out=out) is out
    assert torch.equal(out.view(torch.int16), want.view(torch.int16))
    with pytest.raises(ValueError, match=r"out must be bfloat16 \[T, H\]"):
        fp8gemm.moe(x, ids, w, *weights, out=torch.empty((tokens, hidden), dtype=torch.float32, device="cuda"))
    with pytest.raises(ValueError, match="out must be contiguous"):
        wide = torch.empty((tokens, 2 * hidden), dtype=torch.bfloat16, device="cuda")
        fp8gemm.moe(x, ids, w, *weights, out=wide[:, :hidden])
