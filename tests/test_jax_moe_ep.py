"""fp8gemm.jax.moe_ep on 2 CPU devices (a subprocess: the device count is fixed at JAX's start):
the experts split over one mesh axis, the FP8 rows exchanged by jax.lax.all_to_all (in the
compiled HLO), each device's layer a host stand-in (the layer's arithmetic in jnp float32),
and the result within the layer tolerance of the float64 layer over all experts, for uniform and
skewed routing with dropped pairs, the same bits on a second call."""
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("jax", reason="jax not installed")

SCRIPT = textwrap.dedent('''
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import numpy as np
    import jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from fp8gemm import moe_reference, reference
    import fp8gemm.jax as fj

    E, H, I, K, T = 8, 256, 128, 2, 12
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((E, 2 * I, H)).astype(np.float32) * (3.0 / np.sqrt(H))
    w2 = rng.standard_normal((E, H, I)).astype(np.float32) * (0.3 / np.sqrt(I))
    q1, s1 = (np.stack(v) for v in zip(*(reference.quantize_per_block(w) for w in w1)))
    q2, s2 = (np.stack(v) for v in zip(*(reference.quantize_per_block(w) for w in w2)))

    def dequant_blocks(w, s):                       # [E, N, K] FP8 x [E, N/128, K/128] scales
        n, k = w.shape[1:]
        return w.astype(jnp.float32) * jnp.repeat(jnp.repeat(s, 128, 1), 128, 2)[:, :n, :k]

    def stand_in(rows, ids, wts, w1, w1s, w2, w2s, *, x_scale, limit):
        """The layer's arithmetic in jnp float32 (one pair per row; ids outside the local experts
        give zero rows): the host stand-in for fp8gemm.jax.moe's CUDA target."""
        x = rows.astype(jnp.float32) * jnp.repeat(x_scale, 128, 1)[:, :H]
        e = ids[:, 0]
        ok = (e >= 0) & (e < w1.shape[0])
        es = jnp.where(ok, e, 0)
        h = jnp.einsum("rh,rih->ri", x, dequant_blocks(w1, w1s)[es])
        gate, up = h[:, :I], h[:, I:]
        if limit is not None:
            gate, up = jnp.minimum(gate, limit), jnp.clip(up, -limit, limit)
        act = gate / (1.0 + jnp.exp(-gate)) * up
        g = act.reshape(act.shape[0], I // 128, 128)
        sc = jnp.maximum(jnp.abs(g).max(-1, keepdims=True), 1e-10) / 448.0
        act = ((g / sc).astype(jnp.float8_e4m3fn).astype(jnp.float32) * sc).reshape(act.shape)
        y = jnp.einsum("ri,rhi->rh", act, dequant_blocks(w2, w2s)[es]) * wts[:, :1]
        return jnp.where(ok[:, None], y, 0.0).astype(jnp.bfloat16)

    mesh = Mesh(np.array(jax.devices("cpu")), ("ep",))
    put = lambda v, spec: jax.device_put(jnp.asarray(v), NamedSharding(mesh, spec))
    for case in ("uniform", "skewed"):
        rr = np.random.default_rng(5 if case == "uniform" else 6)
        lo = 4 if case == "skewed" else 0                     # skewed: every pair to device 1's experts
        ids = np.stack([rr.choice(np.arange(lo, E), K, replace=False) for _ in range(T)]).astype(np.int32)
        ids[0, 0], ids[3, 1] = -1, E + 2                      # dropped pairs
        wts = (rr.random((T, K)) + 0.1).astype(np.float32)
        x = rr.standard_normal((T, H)).astype(np.float32)
        xq, xs = reference.quantize_per_token_group(x)
        args = (put(xq, P("ep", None)), put(ids, P("ep", None)), put(wts, P("ep", None)),
                put(q1, P("ep", None, None)), put(s1, P("ep", None, None)),
                put(q2, P("ep", None, None)), put(s2, P("ep", None, None)))
        f = jax.jit(lambda x, i, w, a, b, c, d, xs: fj.moe_ep(x, i, w, a, b, c, d, mesh=mesh, axis="ep",
                                                             x_scale=xs, local_layer=stand_in))
        xs_d = put(xs, P("ep", None))
        assert "all-to-all" in f.lower(*args, xs_d).compile().as_text()
        got = np.asarray(f(*args, xs_d)).astype(np.float64)
        again = np.asarray(f(*args, xs_d)).astype(np.float64)
        ok = (ids >= 0) & (ids < E)
        want = moe_reference.moe(xq, np.where(ok, ids, 0), np.where(ok, wts, 0.0), q1, s1, q2, s2, x_scale=xs)
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err < 1e-2, (case, err)
        assert np.array_equal(got, again), case
    print("ok")
''')


def test_expert_parallel_layer_on_two_cpu_devices(tmp_path):
    # from tmp_path: a checkout's fp8gemm/ folder in the working directory would shadow the install
    res = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stdout[-2000:] + res.stderr[-4000:]
