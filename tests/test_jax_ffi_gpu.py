"""GPU tests of fp8gemm.jax.matmul (the XLA FFI target) under jax.jit: against the float64
reference, tails, output dtypes, vmap, new data through one compiled function, composition with
other jitted ops."""
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
    import cupy
    for i, c in enumerate(cases):
        c_same_b = type(c)(c.a, cases[0].b, c.a_scale, cases[0].b_scale)
        ref = c_same_b.reference(cupy).get()
        assert np.linalg.norm(np.asarray(out[i]) - ref) / np.linalg.norm(ref) <= 1e-4
