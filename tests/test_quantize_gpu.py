"""GPU tests of the device quantizers (fp8gemm.quantize_per_token_group and quantize_per_block on
GPU arrays): bit-exact against the host reference for every input dtype, tails, batch dims,
strided and unaligned rows, zeros and NaN groups or blocks; every framework; bad input; round
trips through matmul."""
import ml_dtypes
import numpy as np
import pytest

import fp8gemm
from fp8gemm import reference

pytestmark = pytest.mark.gpu

BF16 = np.dtype(ml_dtypes.bfloat16)
NP_DTYPES = {"bfloat16": BF16, "float16": np.dtype(np.float16), "float32": np.dtype(np.float32)}


def host_values(shape, dtype, seed):
    """Values spanning several decades per group (so the scales differ), exactly representable
    in ``dtype``; returned in ``dtype``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-6, 6, size=shape[:-1] + (1,)))
    return x.astype(NP_DTYPES[dtype])


def as_bytes(q):
    """FP8 codes of any framework's array as a host uint8 array."""
    mod = type(q).__module__
    if mod.startswith("torch"):
        import torch
        return q.view(torch.uint8).cpu().numpy()
    if mod.startswith(("jax", "jaxlib")):
        import jax.numpy as jnp
        return np.asarray(q.view(jnp.uint8))
    return q.get() if hasattr(q, "get") else np.asarray(q).view(np.uint8)


def to_host(s):
    mod = type(s).__module__
    if mod.startswith("torch"):
        return s.cpu().numpy()
    return s.get() if hasattr(s, "get") else np.asarray(s)


def expect(xh):
    q, s = reference.quantize_per_token_group(xh.astype(np.float32))
    return q.view(np.uint8), s


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("shape", [(1, 128), (5, 300), (64, 4096), (3, 2, 256), (7, 16)], ids=str)
def test_bit_exact_against_reference(dtype, shape):
    import cupy
    xh = host_values(shape, dtype, seed=sum(shape))
    x = cupy.asarray(xh.view(np.int16) if dtype != "float32" else xh)
    if dtype != "float32":            # CuPy has no bfloat16: hand torch the bits
        import torch
        x = torch.from_dlpack(x).view(getattr(torch, dtype))
    q, s = fp8gemm.quantize_per_token_group(x)
    eq, es = expect(xh)
    assert tuple(q.shape) == shape and tuple(s.shape) == shape[:-1] + (-(-shape[-1] // 128),)
    np.testing.assert_array_equal(as_bytes(q), eq)
    np.testing.assert_array_equal(to_host(s), es)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_bit_exact_big_input_and_extreme_scales(dtype):
    """Many groups (301 x 119, not a multiple of the 4 or 8 groups a vector-path warp takes), rows scaled over 2^-135..2^120 -- scales inside the exact reciprocal division's
    range and outside it (eps at its floor 2^-100, an Inf, a NaN) -- bit for bit. An eps below the
    floor is refused: CuPy compiles flush-to-zero, so subnormal scales would flush to 0."""
    import cupy
    import torch
    from fp8gemm import quantize
    rows, k = 301, 128 * 119
    assert rows * (k // 128) % (4 * quantize.VECTOR_LOADS) and rows * (k // 128) % 8
    rng = np.random.default_rng(17)
    xh = rng.standard_normal((rows, k)) * np.exp2(rng.integers(-135, 121, size=(rows, 1)).astype(np.float64))
    xh[7, 1000] = np.inf
    xh[8, 2000] = -np.inf
    xh[9, 3000] = np.nan
    xh = xh.astype(NP_DTYPES[dtype])
    t = torch.from_dlpack(cupy.asarray(xh.view(np.int16) if dtype != "float32" else xh))
    t = t.view(getattr(torch, dtype)) if dtype != "float32" else t
    with pytest.raises(ValueError, match="eps must be"):
        fp8gemm.quantize_per_token_group(t, eps=1e-45)
    q, s = fp8gemm.quantize_per_token_group(t, eps=2.0**-100)
    eq, es = reference.quantize_per_token_group(xh.astype(np.float32), eps=2.0**-100)
    got = as_bytes(q)
    nan = np.isnan(eq.astype(np.float32))          # NaN codes: any NaN encoding (0x7F / 0xFF)
    assert nan.any() and np.array_equal(np.isnan(got.view(reference.FP8_E4M3).astype(np.float32)), nan)
    np.testing.assert_array_equal(got[~nan], eq.view(np.uint8)[~nan])
    np.testing.assert_array_equal(to_host(s), es)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_strided_and_unaligned_rows(dtype):
    """Rows inside a wider buffer (row stride > K), and a view starting 4 elements in (not 16-byte
    aligned): the element-wise path, same values."""
    import cupy
    import torch
    xh = host_values((9, 520), dtype, seed=3)
    t = torch.from_dlpack(cupy.asarray(xh.view(np.int16) if dtype != "float32" else xh))
    t = t.view(getattr(torch, dtype)) if dtype != "float32" else t
    for view in (t[:, :384], t[:, 4:388], t[::2, 8:264]):
        q, s = fp8gemm.quantize_per_token_group(view)
        eq, es = expect(xh[tuple(_index(view, t))])
        np.testing.assert_array_equal(as_bytes(q), eq)
        np.testing.assert_array_equal(to_host(s), es)


def _index(view, base):
    """The numpy index of a 2-D torch view into its base (row step, column range)."""
    esize = base.element_size()
    off = (view.data_ptr() - base.data_ptr()) // esize
    r0, c0 = divmod(off, base.stride(0))
    rstep = view.stride(0) // base.stride(0)
    return slice(r0, r0 + rstep * view.shape[0], rstep), slice(c0, c0 + view.shape[1])


def test_zero_and_nan_groups():
    import cupy
    xh = host_values((4, 256), "float32", seed=5)
    xh[0, :128] = 0.0                 # all-zero group: scale eps / 448, codes 0
    xh[1, 130] = np.nan               # a NaN poisons its own group only
    xh[2, 5] = 448.0 * 2 ** 20        # a huge value: its group's scale grows, codes stay finite
    q, s = fp8gemm.quantize_per_token_group(cupy.asarray(xh))
    eq, es = expect(xh)
    got_q, got_s = as_bytes(q), to_host(s)
    nan_q = np.isnan(eq.view(reference.FP8_E4M3).astype(np.float32))
    assert np.array_equal(np.isnan(got_q.view(reference.FP8_E4M3).astype(np.float32)), nan_q)
    np.testing.assert_array_equal(got_q[~nan_q], eq[~nan_q])
    assert np.array_equal(np.isnan(got_s), np.isnan(es)) and np.isnan(got_s[1, 1])
    np.testing.assert_array_equal(got_s[~np.isnan(es)], es[~np.isnan(es)])
    assert not np.isnan(got_s[1, 0]) and got_s[0, 0] == np.float32(np.float32(1e-10) / np.float32(448))


def test_frameworks_agree_and_keep_their_types():
    import cupy
    import jax.numpy as jnp
    import torch
    xh = host_values((33, 1000), "float32", seed=7)
    outs = {"cupy": fp8gemm.quantize_per_token_group(cupy.asarray(xh)),
            "torch": fp8gemm.quantize_per_token_group(torch.from_numpy(xh).cuda()),
            "jax": fp8gemm.quantize_per_token_group(jnp.asarray(xh))}
    assert outs["cupy"][0].dtype == cupy.uint8 and outs["torch"][0].dtype == torch.float8_e4m3fn
    assert outs["jax"][0].dtype == jnp.float8_e4m3fn and outs["jax"][1].dtype == jnp.float32
    eq, es = expect(xh)
    for name, (q, s) in outs.items():
        np.testing.assert_array_equal(as_bytes(q), eq, err_msg=name)
        np.testing.assert_array_equal(to_host(s), es, err_msg=name)


def test_round_trip_through_matmul():
    """GPU-quantized activations times host-quantized weights: matmul matches the float64 product
    of the dequantized operands (the quantizer's output is what the GEMM expects)."""
    import cupy
    import torch
    m, n, k = 96, 512, 1152
    xh = host_values((m, k), "bfloat16", seed=11)
    wh = np.random.default_rng(12).standard_normal((n, k)).astype(np.float32) * 0.05
    x = torch.from_dlpack(cupy.asarray(xh.view(np.int16))).view(torch.bfloat16)
    qa, sa = fp8gemm.quantize_per_token_group(x)
    qb_h, sb_h = reference.quantize_per_block(wh)
    qb = torch.from_dlpack(cupy.asarray(qb_h.view(np.uint8))).view(torch.float8_e4m3fn)
    sb = torch.from_dlpack(cupy.asarray(sb_h))
    out = fp8gemm.matmul(qa, qb, sa, sb, out_dtype="float32")
    ref = reference.matmul(as_bytes(qa), qb_h, to_host(sa), sb_h)
    err = np.linalg.norm(out.cpu().numpy() - ref) / np.linalg.norm(ref)
    assert err <= 1e-4, err
    # and the quantization itself is close to the bf16 input (E4M3: 3 mantissa bits)
    deq = reference.dequantize_a(as_bytes(qa), to_host(sa))
    rel = np.linalg.norm(deq - xh.astype(np.float64)) / np.linalg.norm(xh.astype(np.float64))
    assert 0 < rel < 0.08


@pytest.mark.parametrize("shape,dtype,framework", [((130, 1024), "bfloat16", "torch"), ((33, 1000), "float32", "cupy"),
                                                   ((3, 5, 256), "float16", "cupy"), ((200, 1536), "float16", "cupy"),
                                                   ((1, 128), "bfloat16", "torch"), ((0, 256), "float32", "torch")],
                         ids=str)
def test_m_major_scales(shape, dtype, framework):
    """m_major_scales=True on the GPU (vector and element paths): the same codes and scale bits as
    the row-major call, the scales an M-major view with 16-byte aligned columns (m_major_ld), and
    matmul takes them as they are, with the same result bits as the row-major scales."""
    import cupy
    import torch
    from fp8gemm.quantize import m_major_ld, m_major_strides
    xh = host_values(shape, dtype, seed=13)
    if framework == "cupy":                    # CuPy has no bfloat16: those cases run on torch
        x = cupy.asarray(xh)
    else:
        x = torch.from_dlpack(cupy.asarray(xh.view(np.int16) if dtype != "float32" else xh))
        x = x.view(getattr(torch, dtype)) if dtype != "float32" else x
    q, s = fp8gemm.quantize_per_token_group(x)
    qm, sm = fp8gemm.quantize_per_token_group(x, m_major_scales=True)
    assert tuple(sm.shape) == tuple(s.shape)
    rows = int(np.prod(shape[:-1]))
    strides = m_major_strides(tuple(s.shape), m_major_ld(rows))
    got = tuple(sm.stride()) if framework == "torch" else tuple(st // 4 for st in sm.strides)
    assert got == strides
    assert (sm.data_ptr() if framework == "torch" else sm.data.ptr) % 16 == 0
    np.testing.assert_array_equal(as_bytes(qm), as_bytes(q))
    np.testing.assert_array_equal(to_host(sm).view(np.uint32), to_host(s).view(np.uint32))
    if len(shape) == 2 and rows > 0 and shape[1] % 16 == 0:       # a K the GEMM takes
        wh = np.random.default_rng(14).standard_normal((256, shape[1])).astype(np.float32) * 0.05
        qb_h, sb_h = reference.quantize_per_block(wh)
        qb, sb = cupy.asarray(qb_h.view(np.uint8)), cupy.asarray(sb_h)
        if framework == "torch":
            qb, sb = torch.from_dlpack(qb).view(torch.float8_e4m3fn), torch.from_dlpack(sb)
        out = "float16"                        # coarse promotion: the As slots where they apply
        ref, got = (fp8gemm.matmul(q, qb, s, sb, out_dtype=out), fp8gemm.matmul(qm, qb, sm, sb, out_dtype=out))
        np.testing.assert_array_equal(to_host(got).view(np.uint16), to_host(ref).view(np.uint16))


def test_empty_rows_and_bad_input():
    import cupy
    import torch
    q, s = fp8gemm.quantize_per_token_group(cupy.zeros((0, 256), dtype=cupy.float32))
    assert q.shape == (0, 256) and s.shape == (0, 2)
    x = torch.zeros((4, 256), device="cuda", dtype=torch.float32)
    with pytest.raises(TypeError, match="x must be bfloat16, float16 or float32"):
        fp8gemm.quantize_per_token_group(x.to(torch.float8_e4m3fn))
    with pytest.raises(ValueError, match="group_size must be 128"):
        fp8gemm.quantize_per_token_group(x, group_size=64)
    with pytest.raises(ValueError, match="contiguous along its last dimension"):
        fp8gemm.quantize_per_token_group(x.t())
    with pytest.raises(ValueError, match=r"eps must be a finite number >= 2\*\*-100"):
        fp8gemm.quantize_per_token_group(x, eps=0.0)


# ---- the weight quantizer (fp8gemm.quantize_per_block on GPU arrays) -------------------------

def _on_gpu(wh, dtype):
    import cupy
    import torch
    t = torch.from_dlpack(cupy.asarray(wh.view(np.int16) if dtype != "float32" else wh))
    return t.view(getattr(torch, dtype)) if dtype != "float32" else t


def expect_block(wh):
    """reference.quantize_per_block per matrix of [..., N, K]: (codes as bytes, scales)."""
    w = wh.astype(np.float32)
    flat = w.reshape((-1,) + w.shape[-2:])
    parts = [reference.quantize_per_block(m) for m in flat]
    q = np.stack([p[0].view(np.uint8) for p in parts]).reshape(w.shape)
    s = np.stack([p[1] for p in parts]).reshape(w.shape[:-2] + parts[0][1].shape)
    return q, s


def block_values(shape, dtype, seed):
    """Values spanning several decades per 128 x 128 block, exactly representable in ``dtype``."""
    rng = np.random.default_rng(seed)
    n, k = shape[-2:]
    lead = shape[:-2]
    rows = np.exp2(rng.integers(-8, 8, size=lead + (-(-n // 128), 1, -(-k // 128), 1)))
    x = rng.standard_normal(lead + (-(-n // 128), 128, -(-k // 128), 128)) * rows
    x = x.reshape(lead + (-(-n // 128) * 128, -(-k // 128) * 128))[..., :n, :k]
    return np.ascontiguousarray(x).astype(NP_DTYPES[dtype])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("shape", [(1, 1), (128, 128), (300, 260), (130, 258), (7, 4096), (3, 200, 136),
                                   (2, 2, 129, 16), (2, 129, 6)], ids=str)
def test_weight_quantizer_bit_exact(dtype, shape, monkeypatch):
    """Every input dtype, N and K tails (blocks zero-filled past them), a batch of matrices in one
    launch, the vector path (K % 4 == 0) and the element path: codes and scales bit for bit the
    host reference's."""
    from fp8gemm import compiler
    paths = []
    get = compiler.get_kernel
    monkeypatch.setattr(compiler, "get_kernel", lambda dev, v, targs, *a: paths.append(targs[-1]) or get(dev, v, targs, *a))
    wh = block_values(shape, dtype, seed=sum(shape))
    q, s = fp8gemm.quantize_per_block(_on_gpu(wh, dtype))
    assert paths == ["true" if shape[-1] % 4 == 0 else "false"], paths
    eq, es = expect_block(wh)
    assert tuple(q.shape) == shape and tuple(s.shape) == es.shape
    np.testing.assert_array_equal(as_bytes(q), eq)
    np.testing.assert_array_equal(to_host(s), es)


def test_weight_quantizer_strided_special_values_and_frameworks():
    """Rows inside a wider buffer, a transposed batch (matrices not adjacent), zero / NaN / Inf /
    huge blocks, the smallest eps; CuPy, torch and JAX in, each framework's types out."""
    import cupy
    import jax.numpy as jnp
    import torch
    wh = block_values((260, 520), "float32", seed=9)
    wh[:128, :128] = 0.0                   # all-zero block: scale eps / 448
    wh[130, 200] = np.nan                  # poisons block (1, 1) only
    wh[5, 300] = np.inf                    # block (0, 2): Inf scale, codes NaN or 0
    wh[200, 10] = 448.0 * 2 ** 30
    t = torch.from_numpy(wh).cuda()
    # compact rows, every other row from column 8, and rows starting 8 bytes off a 16-byte
    # boundary (the element path)
    for view in (t[:, :384], t[::2, 8:264], t[:, 2:386]):
        host = view.cpu().numpy()
        q, s = fp8gemm.quantize_per_block(view, eps=2.0**-100)
        eq, es = reference.quantize_per_block(host, eps=2.0**-100)
        got_q, eq = as_bytes(q), eq.view(np.uint8)
        nan_q = np.isnan(eq.view(reference.FP8_E4M3).astype(np.float32))
        assert np.array_equal(np.isnan(got_q.view(reference.FP8_E4M3).astype(np.float32)), nan_q)
        np.testing.assert_array_equal(got_q[~nan_q], eq[~nan_q])
        got_s = to_host(s)
        assert np.array_equal(np.isnan(got_s), np.isnan(es))
        np.testing.assert_array_equal(got_s[~np.isnan(es)], es[~np.isnan(es)])
    batch = torch.from_numpy(block_values((200, 3, 136), "float32", seed=4)).cuda().transpose(0, 1)
    q, s = fp8gemm.quantize_per_block(batch)       # [3, 200, 136] with matrices 136 elements apart
    eq, es = expect_block(batch.cpu().numpy())
    np.testing.assert_array_equal(as_bytes(q), eq)
    np.testing.assert_array_equal(to_host(s), es)
    wh = block_values((300, 260), "float32", seed=2)
    eq, es = expect_block(wh)
    outs = {"cupy": fp8gemm.quantize_per_block(cupy.asarray(wh)),
            "torch": fp8gemm.quantize_per_block(torch.from_numpy(wh).cuda()),
            "jax": fp8gemm.quantize_per_block(jnp.asarray(wh))}
    assert outs["cupy"][0].dtype == cupy.uint8 and outs["torch"][0].dtype == torch.float8_e4m3fn
    assert outs["jax"][0].dtype == jnp.float8_e4m3fn and outs["jax"][1].dtype == jnp.float32
    for name, (q, s) in outs.items():
        np.testing.assert_array_equal(as_bytes(q), eq, err_msg=name)
        np.testing.assert_array_equal(to_host(s), es, err_msg=name)


def test_weight_quantizer_feeds_matmul_and_refuses_bad_input():
    """A DeepSeek-size weight (7168 x 2048) quantized on the GPU gives matmul the same result as the
    host quantizer's codes; bad input raises before any launch."""
    import torch
    wh = (np.random.default_rng(3).standard_normal((7168, 2048)) * 0.02).astype(np.float32)
    qw, sw = fp8gemm.quantize_per_block(torch.from_numpy(wh).cuda().to(torch.bfloat16))
    hq, hs = reference.quantize_per_block(torch.from_numpy(wh).to(torch.bfloat16).float().numpy())
    np.testing.assert_array_equal(as_bytes(qw), hq.view(np.uint8))
    np.testing.assert_array_equal(to_host(sw), hs)
    x = torch.randn(64, 2048, device="cuda").to(torch.bfloat16)
    qa, sa = fp8gemm.quantize_per_token_group(x)
    out = fp8gemm.matmul(qa, qw, sa, sw)
    ref = reference.matmul(as_bytes(qa), hq, to_host(sa), hs)
    err = np.linalg.norm(out.float().cpu().numpy() - ref) / np.linalg.norm(ref)
    assert err <= 4e-3, err
    w = torch.zeros((256, 256), device="cuda")
    with pytest.raises(TypeError, match="w must be bfloat16, float16 or float32"):
        fp8gemm.quantize_per_block(w.to(torch.float8_e4m3fn))
    with pytest.raises(ValueError, match=r"block must be \(128, 128\) on the GPU"):
        fp8gemm.quantize_per_block(w, block=(64, 64))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        fp8gemm.quantize_per_block(w[0])
    with pytest.raises(ValueError, match="contiguous along its last dimension"):
        fp8gemm.quantize_per_block(w.t())
    with pytest.raises(ValueError, match=r"eps must be a finite number >= 2\*\*-100"):
        fp8gemm.quantize_per_block(w, eps=0.0)
