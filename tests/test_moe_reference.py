"""CPU: the float64 MoE / grouped-GEMM reference (fp8gemm/moe_reference.py) against
independent per-row computations -- routing, both grouped layouts, SwiGLU with its clamp, every
stage of the layer, the combine -- plus empty experts, one expert for all tokens, and bad input."""
import numpy as np
import pytest

from fp8gemm import moe_reference as mr
from fp8gemm import reference


def weights(rng, e, n, k):
    """E experts of [n, k] FP8 with 128x128 block scales (|W x| ~ 1 for |x| ~ 1)."""
    qs, ss = zip(*(reference.quantize_per_block(rng.standard_normal((n, k)) / np.sqrt(k)) for _ in range(e)))
    return np.stack(qs), np.stack(ss)


def acts(rng, rows, k):
    return reference.quantize_per_token_group(rng.standard_normal((rows, k)).astype(np.float32))


def test_route_sorts_pairs_by_expert_stably():
    ids = np.array([[2, 0], [0, 3], [2, 1], [0, 2]])
    tokens, slots, offsets = mr.route(ids, 5)
    assert offsets.tolist() == [0, 3, 4, 7, 8, 8]                  # expert 4 gets no token
    experts = ids[tokens, slots]
    assert experts.tolist() == [0, 0, 0, 1, 2, 2, 2, 3]
    assert list(zip(tokens.tolist(), slots.tolist()))[:3] == [(0, 1), (1, 0), (3, 0)]   # token order
    one = mr.route(np.zeros((6, 2), dtype=np.int32), 4)[2]
    assert one.tolist() == [0, 12, 12, 12, 12]


def test_grouped_contiguous_matches_per_row_naive():
    rng = np.random.default_rng(0)
    e, n, k = 4, 130, 272                       # N and K tails
    b, bs = weights(rng, e, n, k)
    offsets = np.array([0, 3, 3, 7, 9])         # expert 1 empty
    a, sa = acts(rng, 9, k)
    got = mr.grouped_matmul_contiguous(a, sa, b, bs, offsets)
    for g in range(e):
        for r in range(offsets[g], offsets[g + 1]):
            want = reference.matmul_naive(a[r:r + 1], b[g], sa[r:r + 1], bs[g])
            np.testing.assert_allclose(got[r:r + 1], want, rtol=1e-12, atol=1e-12)
    assert np.abs(got).max() > 0.1


def test_grouped_masked_computes_counted_rows_and_zeros_the_rest():
    rng = np.random.default_rng(1)
    e, n, k, max_rows = 3, 256, 256, 5
    b, bs = weights(rng, e, n, k)
    a, sa = acts(rng, e * max_rows, k)
    a, sa = a.reshape(e, max_rows, k), sa.reshape(e, max_rows, -1)
    counts = np.array([5, 0, 2])
    got = mr.grouped_matmul_masked(a, sa, b, bs, counts)
    for g in range(e):
        c = counts[g]
        if c:
            np.testing.assert_allclose(got[g, :c], reference.matmul(a[g, :c], b[g], sa[g, :c], bs[g]), rtol=1e-12)
        assert not got[g, c:].any()
    assert np.abs(got[0]).max() > 0.1


def test_swiglu_and_its_clamp():
    h = np.array([[20.0, -1.0, 0.5, 3.0, -30.0, 2.0],          # gate 20 -> 10; up -30 -> -10
                  [-800.0, 0.0, 1.0, 5.0, 5.0, 5.0]])          # silu(-800) = -0, no NaN
    got = mr.swiglu(h)
    silu = lambda g: g / (1 + np.exp(-g))  # noqa: E731
    want = np.array([[silu(10.0) * 3.0, silu(-1.0) * -10.0, silu(0.5) * 2.0],
                     [0.0, silu(0.0) * 5.0, silu(1.0) * 5.0]])
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)
    assert np.isfinite(got).all()
    unclamped = mr.swiglu(h, limit=None)
    assert unclamped[0, 0] == pytest.approx(silu(20.0) * 3.0) and unclamped[0, 1] == pytest.approx(silu(-1.0) * -30.0)


def _layer(rng, t=7, hidden=256, inter=384, e=5, topk=3):
    w1, s1 = weights(rng, e, 2 * inter, hidden)
    w2, s2 = weights(rng, e, hidden, inter)
    x = rng.standard_normal((t, hidden)).astype(np.float32)
    ids = np.stack([rng.choice(e, size=topk, replace=False) for _ in range(t)])
    w = rng.random((t, topk))
    return x, ids, w, w1, s1, w2, s2


def test_every_stage_of_the_layer_matches_a_per_pair_computation():
    """h, act, y and the combine, each from the previous stage's own values, per (token, slot)
    pair with single-row matmuls: the requantization's rounding cannot hide a mismatch."""
    rng = np.random.default_rng(2)
    x, ids, w, w1, s1, w2, s2 = _layer(rng)
    out, st = mr.moe(x, ids, w, w1, s1, w2, s2, return_intermediates=True)
    xq, xs = reference.quantize_per_token_group(x)
    inter = w2.shape[2]
    for p, (t, j) in enumerate(zip(st["tokens"], st["slots"])):
        e = ids[t, j]
        h = reference.matmul(xq[t:t + 1], w1[e], xs[t:t + 1], s1[e])[0]
        np.testing.assert_allclose(st["h"][p], h, rtol=1e-12, atol=1e-13)
        gate = np.minimum(st["h"][p, :inter], 10.0)
        up = np.clip(st["h"][p, inter:], -10.0, 10.0)
        np.testing.assert_allclose(st["act"][p], gate / (1 + np.exp(-gate)) * up, rtol=1e-14, atol=1e-15)
        q, s = reference.quantize_per_token_group(st["act"][p:p + 1].astype(np.float32))
        assert np.array_equal(q.view(np.uint8), st["act_q"][p:p + 1].view(np.uint8))
        assert np.array_equal(s, st["act_scale"][p:p + 1])
        y = reference.matmul(st["act_q"][p:p + 1], w2[e], st["act_scale"][p:p + 1], s2[e])[0]
        np.testing.assert_allclose(st["y"][p], y, rtol=1e-12, atol=1e-13)
    want = np.zeros_like(out)
    for p, (t, j) in enumerate(zip(st["tokens"], st["slots"])):
        want[t] += w[t, j] * st["y"][p]
    np.testing.assert_allclose(out, want, rtol=1e-13, atol=1e-14)
    assert np.abs(out).max() > 0.01


def test_prequantized_input_gives_the_same_layer():
    rng = np.random.default_rng(3)
    x, ids, w, w1, s1, w2, s2 = _layer(rng)
    xq, xs = reference.quantize_per_token_group(x)
    np.testing.assert_array_equal(mr.moe(x, ids, w, w1, s1, w2, s2),
                                  mr.moe(xq, ids, w, w1, s1, w2, s2, x_scale=xs))


def test_all_tokens_on_one_expert_and_zero_weights():
    rng = np.random.default_rng(4)
    x, ids, w, w1, s1, w2, s2 = _layer(rng, topk=1)
    one = np.full_like(ids, 2)
    out, st = mr.moe(x, one, w, w1, s1, w2, s2, return_intermediates=True)
    assert st["offsets"].tolist() == [0, 0, 0, 7, 7, 7]
    assert np.abs(out).max() > 0.01
    assert not mr.moe(x, one, np.zeros_like(w), w1, s1, w2, s2).any()


@pytest.mark.parametrize("bad,match", [
    (dict(ids=np.array([[0, 1, 9]] * 7)), "topk_ids must lie in 0..4"),
    (dict(ids=np.zeros((6, 3), dtype=np.int64)), "topk_ids and topk_weights must both be"),
    (dict(ids=np.zeros((7, 3))), "integer"),
    (dict(w2_cut=True), "w2 must be"),
])
def test_bad_input_names_the_argument(bad, match):
    rng = np.random.default_rng(5)
    x, ids, w, w1, s1, w2, s2 = _layer(rng)
    ids = bad.get("ids", ids)
    if bad.get("w2_cut"):
        w2, s2 = w2[:, :128], s2[:, :1]
    with pytest.raises(ValueError, match=match):
        mr.moe(x, ids, w, w1, s1, w2, s2)
