"""The numba host quantizers (fp8gemm/host_quant.py) against the NumPy definitions
(reference.py): bit for bit on awkward values and shapes, every float32 bit pattern class
through the rounding, and the public entry points use them."""
import numpy as np
import pytest

import fp8gemm
from fp8gemm import host_quant, reference

pytest.importorskip("numba", reason="numba is not installed: the NumPy quantizers run instead")


def awkward(shape, seed):
    """Magnitudes over 2^-43 .. 2^43, NaN, +-Inf, +-0 and float32 subnormals."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(shape) * np.exp(rng.uniform(-30, 30, shape))).astype(np.float32)
    flat = w.reshape(-1)
    flat[::97] = np.nan
    flat[5::101] = np.inf
    flat[7::103] = -np.inf
    flat[9::89] = 0.0
    flat[11::83] = -0.0
    flat[:130] = 1e-42
    return w


def same(got, want):
    (gq, gs), (wq, ws) = got, want
    assert gq.dtype == wq.dtype and gq.shape == wq.shape and gs.shape == ws.shape
    assert np.array_equal(gq.view(np.uint8), wq.view(np.uint8)), "FP8 values differ"
    assert np.array_equal(gs.view(np.uint32), ws.view(np.uint32)), "scales differ"


@pytest.mark.parametrize("shape", [(300, 1000), (7, 129), (256, 256), (129, 4097), (1, 1)])
def test_per_block_matches_numpy(shape):
    w = awkward(shape, sum(shape))
    same(host_quant.quantize_per_block(w), reference.quantize_per_block(w))
    same(host_quant.quantize_per_block(w, (64, 32), 1e-3), reference.quantize_per_block(w, (64, 32), 1e-3))


@pytest.mark.parametrize("shape", [(5, 300), (2, 3, 128), (4, 1), (1000, 7168)])
def test_per_token_group_matches_numpy(shape):
    x = awkward(shape, 3)
    same(host_quant.quantize_per_token_group(x), reference.quantize_per_token_group(x))


def test_rounding_of_every_bit_pattern_class():
    """A sample of all 2^32 float32 patterns (every 65521st, all exponents and signs, NaN and Inf
    payloads), each alone in its 1 x 128 group with 127 values of 448 (scale exactly 1)."""
    bits = np.arange(0, 1 << 32, 65521, dtype=np.uint64).astype(np.uint32)
    x = np.full((bits.size, 128), 448.0, dtype=np.float32)
    x[:, 0] = np.clip(bits.view(np.float32), -448, 448)
    x[np.isnan(x[:, 0]), 1:] = 448.0
    same(host_quant.quantize_per_token_group(x), reference.quantize_per_token_group(x))


def test_public_entry_points_use_it(monkeypatch):
    calls = []
    real = host_quant._quantize_2d
    monkeypatch.setattr(host_quant, "_quantize_2d", lambda *a: calls.append(a[1:]) or real(*a))
    w = awkward((200, 300), 1)
    same(fp8gemm.quantize_per_block(w), reference.quantize_per_block(w))
    same(fp8gemm.quantize_per_token_group(w), reference.quantize_per_token_group(w))
    assert [c[:2] for c in calls] == [(128, 128), (1, 128)]


def test_empty_and_non_2d_fall_back():
    same(host_quant.quantize_per_block(np.zeros((0, 5), np.float32)),
         reference.quantize_per_block(np.zeros((0, 5), np.float32)))
    x = np.zeros((3, 0), np.float32)
    q, s = host_quant.quantize_per_token_group(x)
    assert q.shape == (3, 0)


def test_batched_weights_per_matrix():
    """[E, N, K] on the host: each matrix quantized as reference.quantize_per_block does it."""
    import fp8gemm
    w = np.random.default_rng(5).standard_normal((3, 2, 200, 136)).astype(np.float32)
    q, s = fp8gemm.quantize_per_block(w)
    assert q.shape == w.shape and s.shape == (3, 2, 2, 2)
    for i in range(3):
        for j in range(2):
            rq, rs = reference.quantize_per_block(w[i, j])
            assert np.array_equal(q[i, j].view(np.uint8), rq.view(np.uint8)) and np.array_equal(s[i, j], rs)


def test_weight_quantizer_refuses_cpu_torch_and_other_blocks_on_the_gpu_path():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    import fp8gemm
    with pytest.raises(ValueError, match=r"w is a torch tensor on cpu; pass a CUDA tensor"):
        fp8gemm.quantize_per_block(torch.zeros(256, 256))
    with pytest.raises(ValueError, match=r"block must be \(128, 128\) on the GPU"):
        fp8gemm.quantize_per_block(torch.zeros(256, 256), block=(64, 64))


@pytest.mark.parametrize("shape", [(5, 300), (3, 7, 256), (1, 128), (8, 1024)])
def test_m_major_scales_on_the_host(shape):
    """m_major_scales=True: the same codes and scale values, the scales as an M-major view whose
    columns (one per group) start 16-byte aligned, every leading index folded into one row index."""
    from fp8gemm.quantize import m_major_ld, m_major_strides
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    q, s = fp8gemm.quantize_per_token_group(x)
    qm, sm = fp8gemm.quantize_per_token_group(x, m_major_scales=True)
    assert sm.shape == s.shape and sm.dtype == np.float32
    assert np.array_equal(qm.view(np.uint8), q.view(np.uint8)) and np.array_equal(sm, s)
    rows = int(np.prod(shape[:-1]))
    ld = m_major_ld(rows)
    assert ld % 4 == 0 and ld >= rows
    assert sm.strides == tuple(4 * st for st in m_major_strides(s.shape, ld))
    assert sm.strides[-1] == 4 * ld and sm.strides[-2] == 4          # rows contiguous within a group


def test_m_major_rules():
    from fp8gemm.quantize import m_major_ld, m_major_strides
    assert [m_major_ld(r) for r in (0, 1, 4, 5, 130)] == [4, 4, 4, 8, 132]
    assert m_major_strides((2, 3, 5), 8) == (3, 1, 8)
    assert m_major_strides((5,), 4) == (4,)
    with pytest.raises(TypeError, match="m_major_scales must be True or False"):
        fp8gemm.quantize_per_token_group(np.ones((2, 128), np.float32), m_major_scales=1)


def test_m_major_scales_refused_for_jax():
    jnp = pytest.importorskip("jax.numpy")
    with pytest.raises(ValueError, match="JAX arrays carry no strides"):
        fp8gemm.quantize_per_token_group(jnp.ones((2, 128), jnp.float32), m_major_scales=True)


@pytest.mark.parametrize("fn", [fp8gemm.quantize_per_token_group, fp8gemm.quantize_per_block])
def test_host_quantizers_refuse_bad_input(fn):
    """The GPU path's rules on the host: eps > 0 that keeps eps / 448 a normal float32 (eps = 0 made
    zero blocks NaN codes with scale 0), real floating-point values, enough dimensions."""
    x = np.zeros((4, 256), np.float32)
    for eps in (0, 0.0, -1.0, float("nan"), float("inf"), 2.0**-120):
        with pytest.raises(ValueError, match="eps must be a finite number >= 2\\*\\*-100"):
            fn(x, eps=eps)
    for bad in (np.ones((4, 256), np.int64), np.ones((4, 256), np.complex64), np.ones((4, 256), bool)):
        with pytest.raises(TypeError, match="must hold floating-point values"):
            fn(bad)
    q, s = fn(x.astype(np.float64))                       # float64 (NumPy's default) is taken
    assert np.all(s > 0) and not np.isnan(q.astype(np.float32)).any()


def test_host_quantizers_check_dimensions():
    with pytest.raises(ValueError, match=r"w must be \[\.\.\., N, K\] \(at least 2 dimensions\); got shape \(256,\)"):
        fp8gemm.quantize_per_block(np.ones(256, np.float32))
    with pytest.raises(ValueError, match=r"x must be \[\.\.\., K\] \(at least 1 dimension\); got shape \(\)"):
        fp8gemm.quantize_per_token_group(np.float32(1.0))
    with pytest.raises(ValueError, match="group_size must be a positive integer"):
        fp8gemm.quantize_per_token_group(np.ones((2, 128), np.float32), group_size=0)
    with pytest.raises(ValueError, match=r"block\[0\] must be a positive integer"):
        fp8gemm.quantize_per_block(np.ones((2, 128), np.float32), block=(0, 128))
