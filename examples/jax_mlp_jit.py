"""A two-layer FP8 MLP in JAX under jax.jit: both GEMMs are fp8gemm.jax.matmul (an XLA FFI call
that launches on XLA's stream), the activation quantization per 1x128 group is plain jnp inside
the same jit. Checks the result against a float64 NumPy reference of the same quantized pipeline.

    python examples/jax_mlp_jit.py          # prints "ok" and the error, exits 1 on a mismatch
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np

import fp8gemm
from fp8gemm.hw import require_gpu
import fp8gemm.jax as fj

T, H, I = 64, 1024, 2048          # tokens, hidden, intermediate


def quantize(x):
    """[T, K] float -> (float8_e4m3fn [T, K], float32 scales [T, K/128]), amax/448 per group."""
    t, k = x.shape
    g = x.astype(jnp.float32).reshape(t, k // 128, 128)
    scale = jnp.maximum(jnp.abs(g).max(axis=-1), 1e-10) / 448.0
    q = (g / scale[..., None]).astype(jnp.float8_e4m3fn).reshape(t, k)
    return q, scale


@jax.jit
def mlp(x, w1, s1, w2, s2):
    a, sa = quantize(x)
    h = fj.matmul(a, w1, sa, s1)                          # [T, I] bf16
    h = jax.nn.silu(h.astype(jnp.float32))
    b, sb = quantize(h)
    return fj.matmul(b, w2, sb, s2, out_dtype="float32"), (a, sa, b, sb)   # [T, H]


def main():
    require_gpu("examples/jax_mlp_jit.py", "jax")  # says what is missing, without a traceback
    rng = np.random.default_rng(0)
    x = rng.standard_normal((T, H)).astype(np.float32)
    w1, s1 = fp8gemm.quantize_per_block(rng.standard_normal((I, H)).astype(np.float32) / np.sqrt(H))
    w2, s2 = fp8gemm.quantize_per_block(rng.standard_normal((H, I)).astype(np.float32) / np.sqrt(I))
    y, (a, sa, b, sb) = mlp(jnp.asarray(x, jnp.bfloat16), jnp.asarray(w1), jnp.asarray(s1),
                            jnp.asarray(w2), jnp.asarray(s2))
    # The reference: each GEMM in float64 from the quantized operands jit produced.
    ref_h = fp8gemm.reference.matmul(np.asarray(a), w1, np.asarray(sa), s1)
    ref_y = fp8gemm.reference.matmul(np.asarray(b), w2, np.asarray(sb), s2)
    err = float(np.linalg.norm(np.asarray(y, np.float64) - ref_y) / np.linalg.norm(ref_y))
    assert np.linalg.norm(ref_h) > 0 and np.linalg.norm(ref_y) > 0
    ok = err <= 1e-4                 # fp32 output: fp8gemm's bound
    print(f"{'ok' if ok else 'MISMATCH'}: jax.jit MLP [{T}x{H}] -> [{T}x{I}] -> [{T}x{H}], "
          f"relative error of the second GEMM {err:.2e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
