"""GPU tests of fp8gemm.jax (the XLA FFI targets) under jax.jit: matmul against the float64
reference, tails, output dtypes, vmap, new data through one compiled function, composition with
other jitted ops; the grouped GEMMs against eager bit for bit; the quantizers against the host
ones bit for bit."""
import numpy as np
import pytest

from generators import random_case

pytestmark = pytest.mark.gpu

TOL = {"bfloat16": 4e-3, "float16": 1e-3, "float32": 1e-4}


def _jax_operands(case):
    import jax.numpy as jnp
    a = jnp.asarray(case.a.get().view(np.uint8)).view(jnp.float8_e4m3fn)
    b = jnp.asarray(case.b.get().view(np.uint8)).view(jnp.float8_e4m3fn)
    return a, b, jnp.asarray(case.a_scale.get()), jnp.asarray(case.b_scale.get())


def _err(out, case):
    import cupy
    ref = case.reference(cupy).get()
    got = np.asarray(out.astype("float32"), dtype=np.float64)
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("m,n,k,dt", [(1, 4096, 4096, "bfloat16"), (200, 300, 1040, "float32"),
                                      (64, 7168, 2048, "float16"), (1024, 1536, 4096, "bfloat16")],
                         ids=str)
def test_jit_matches_reference(m, n, k, dt):
    import jax
    import fp8gemm.jax as fj
    case = random_case(m, n, k, seed=m + n + k)
    f = jax.jit(lambda *x: fj.matmul(*x, out_dtype=dt))
    out = f(*_jax_operands(case))
    assert out.shape == (m, n) and str(out.dtype) == dt
    assert _err(out, case) <= TOL[dt]


def test_one_compiled_function_follows_new_data_and_composes():
    import jax
    import jax.numpy as jnp
    import fp8gemm.jax as fj

    @jax.jit
    def layer(a, b, sa, sb):
        return jnp.tanh(fj.matmul(a, b, sa, sb, out_dtype="float32")) * 2.0

    for seed in (1, 2):
        case = random_case(96, 512, 1152, seed=seed)
        out = layer(*_jax_operands(case))
        import cupy
        ref = np.tanh(case.reference(cupy).get()) * 2.0
        assert np.linalg.norm(np.asarray(out) - ref) / np.linalg.norm(ref) <= 1e-4


def test_vmap_over_a_batch_of_activations():
    import jax
    import jax.numpy as jnp
    import fp8gemm.jax as fj
    cases = [random_case(32, 256, 512, seed=s) for s in (5, 6)]
    ops = [_jax_operands(c) for c in cases]
    a = jnp.stack([o[0] for o in ops])
    sa = jnp.stack([o[2] for o in ops])
    b, sb = ops[0][1], ops[0][3]
    out = jax.jit(jax.vmap(lambda x, s: fj.matmul(x, b, s, sb, out_dtype="float32")))(a, sa)
    assert out.shape == (2, 32, 256)
    # the batch folded into M: the same bits as one call on the stacked activations
    once = jax.jit(lambda x, s: fj.matmul(x, b, s, sb, out_dtype="float32"))(a, sa)
    assert np.array_equal(np.asarray(out).view(np.uint32), np.asarray(once).view(np.uint32))
    import cupy
    for i, c in enumerate(cases):
        c_same_b = type(c)(c.a, cases[0].b, c.a_scale, cases[0].b_scale)
        ref = c_same_b.reference(cupy).get()
        assert np.linalg.norm(np.asarray(out[i]) - ref) / np.linalg.norm(ref) <= 1e-4


def test_grouped_gemms_under_jit_equal_eager_bitwise():
    """fp8gemm.jax.grouped_matmul_contiguous / _masked under jit give the eager grouped GEMMs'
    bits on the groups' rows (offsets / counts on the device)."""
    import jax
    import jax.numpy as jnp
    import fp8gemm
    import fp8gemm.jax as fj
    from test_grouped_gpu import contiguous_case
    sizes = [0, 1, 65, 130, 0, 64]
    a, sa, b, sb, offsets = contiguous_case(sizes, 384, 1024, 13)
    to_jax = lambda x, fp8=False: (jnp.asarray(x.get().view(np.uint8)).view(jnp.float8_e4m3fn) if fp8
                                   else jnp.asarray(x.get()))
    eager = fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets).get().view(np.uint16)
    got = jax.jit(fj.grouped_matmul_contiguous)(to_jax(a, True), to_jax(b, True), to_jax(sa), to_jax(sb),
                                                 to_jax(offsets))
    rows = sum(sizes)
    assert np.array_equal(np.asarray(got).view(np.uint16)[:rows], eager[:rows])
    g, max_rows = len(sizes), max(sizes)
    am = np.zeros((g, max_rows, 1024), np.uint8)
    sam = np.ones((g, max_rows, 8), np.float32)
    ah, sah = a.get().view(np.uint8), sa.get()
    start = 0
    for e, c in enumerate(sizes):
        am[e, :c], sam[e, :c] = ah[start:start + c], sah[start:start + c]
        start += c
    counts = jnp.asarray(np.array(sizes, np.int32))
    masked = jax.jit(lambda *x: fj.grouped_matmul_masked(*x, out_dtype="bfloat16"))(
        jnp.asarray(am).view(jnp.float8_e4m3fn), to_jax(b, True), jnp.asarray(sam), to_jax(sb), counts)
    masked = np.asarray(masked).view(np.uint16)
    start = 0
    for e, c in enumerate(sizes):
        assert np.array_equal(masked[e, :c], eager[start:start + c])
        start += c


def test_quantizers_under_jit_equal_the_host_ones():
    """fp8gemm.jax.quantize_per_token_group / quantize_per_block under jit: bit for bit the host
    quantizers, and a jitted quantize -> matmul close to the reference."""
    import jax
    import jax.numpy as jnp
    import ml_dtypes
    import fp8gemm.jax as fj
    from fp8gemm import reference
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((37, 1000)) * 3).astype(ml_dtypes.bfloat16)
    q, s = jax.jit(fj.quantize_per_token_group)(jnp.asarray(x))
    eq, es = reference.quantize_per_token_group(x.astype(np.float32))
    assert q.dtype == jnp.float8_e4m3fn
    np.testing.assert_array_equal(np.asarray(q).view(np.uint8), eq.view(np.uint8))
    np.testing.assert_array_equal(np.asarray(s), es)
    w = rng.standard_normal((2, 300, 1000)).astype(np.float32) * 0.05
    qw, sw = jax.jit(fj.quantize_per_block)(jnp.asarray(w))
    for i in range(2):
        rq, rs = reference.quantize_per_block(w[i])
        np.testing.assert_array_equal(np.asarray(qw[i]).view(np.uint8), rq.view(np.uint8))
        np.testing.assert_array_equal(np.asarray(sw[i]), rs)

    @jax.jit
    def layer(x, w):
        q, s = fj.quantize_per_token_group(x)
        qw, sw = fj.quantize_per_block(w)
        return fj.matmul(q, qw, s, sw, out_dtype="float32")
    xk, wk = x[:, :992], w[0][:, :992]                   # the GEMM needs K % 16 == 0; a K tail of 96
    out = np.asarray(layer(jnp.asarray(xk), jnp.asarray(wk)))
    qa, sa = reference.quantize_per_token_group(xk.astype(np.float32))
    qb, sb = reference.quantize_per_block(wk)
    ref = reference.matmul(qa.view(np.uint8), qb, sa, sb)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) <= 1e-4


def test_moe_under_jit_equals_eager_bitwise():
    """fp8gemm.jax.moe under jit gives fp8gemm.moe's bits (the same layer on XLA's buffers), for
    new routing through one compiled function."""
    import jax
    import jax.numpy as jnp
    import fp8gemm
    import fp8gemm.jax as fj
    from test_moe_gpu import layer, routing
    experts, hidden, inter = 8, 384, 256
    q1, s1, q2, s2 = layer(experts, hidden, inter, seed=4)
    w = (jnp.asarray(q1.view(np.uint8)).view(jnp.float8_e4m3fn), jnp.asarray(s1),
         jnp.asarray(q2.view(np.uint8)).view(jnp.float8_e4m3fn), jnp.asarray(s2))
    f = jax.jit(fj.moe)
    for tokens, seed in ((40, 1), (300, 2)):
        ids, wts = routing(tokens, experts, 2, seed == 2, seed=seed)
        x = jnp.asarray(np.random.default_rng(seed).standard_normal((tokens, hidden)), jnp.bfloat16)
        got = f(x, jnp.asarray(ids.astype(np.int32)), jnp.asarray(wts), *w)
        want = fp8gemm.moe(x, jnp.asarray(ids.astype(np.int32)), jnp.asarray(wts), *w)
        assert np.array_equal(np.asarray(got).view(np.uint16), np.asarray(want).view(np.uint16))
