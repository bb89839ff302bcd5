"""A two-layer FP8 MLP in JAX under jax.jit over every JAX device: the tokens split over the mesh
axis "data", the weights replicated, both GEMMs fp8gemm.jax.sharded_matmul, so that each device
runs fp8gemm on its own tokens with no collective. (sharded_matmul also splits the weight rows, N,
over a second mesh axis: see tests/test_jax_sharding.py.) Checks the result against a float64 NumPy
reference of the same quantized pipeline.

    python examples/jax_sharded_mlp.py      # prints "ok" and the error, exits 1 on a mismatch
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import fp8gemm
from fp8gemm.hw import require_gpu
import fp8gemm.jax as fj
from jax_mlp_jit import quantize              # the same per-1x128 jnp quantizer (examples/ is on sys.path)

H, I = 1024, 2048                 # hidden, intermediate


def main():
    require_gpu("examples/jax_sharded_mlp.py", "jax")  # says what is missing, without a traceback
    devices = jax.devices()
    mesh = Mesh(np.array(devices), ("data",))
    tokens = 64 * len(devices)
    gemm = lambda *x, **kw: fj.sharded_matmul(*x, mesh=mesh, tokens="data", **kw)

    @jax.jit
    def mlp(x, w1, s1, w2, s2):
        a, sa = quantize(x)
        h = jax.nn.silu(gemm(a, w1, sa, s1).astype(jnp.float32))
        b, sb = quantize(h)
        return gemm(b, w2, sb, s2, out_dtype="float32"), (b, sb)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((tokens, H)).astype(np.float32)
    w1, s1 = fp8gemm.quantize_per_block(rng.standard_normal((I, H)).astype(np.float32) / np.sqrt(H))
    w2, s2 = fp8gemm.quantize_per_block(rng.standard_normal((H, I)).astype(np.float32) / np.sqrt(I))
    shard = NamedSharding(mesh, P("data", None))
    rep = NamedSharding(mesh, P())
    y, (b, sb) = mlp(jax.device_put(jnp.asarray(x, jnp.bfloat16), shard), jax.device_put(jnp.asarray(w1), rep),
                     jax.device_put(jnp.asarray(s1), rep), jax.device_put(jnp.asarray(w2), rep),
                     jax.device_put(jnp.asarray(s2), rep))
    ref_y = fp8gemm.reference.matmul(np.asarray(b), w2, np.asarray(sb), s2)
    err = float(np.linalg.norm(np.asarray(y, np.float64) - ref_y) / np.linalg.norm(ref_y))
    ok = err <= 1e-4 and y.sharding.spec == P("data", None)
    print(f"{'ok' if ok else 'MISMATCH'}: sharded jax.jit MLP on {len(devices)} device(s), [{tokens}x{H}] -> "
          f"[{tokens}x{I}] -> [{tokens}x{H}], relative error of the second GEMM {err:.2e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
