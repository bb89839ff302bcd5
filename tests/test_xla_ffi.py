"""CPU: the XLA FFI plumbing of fp8gemm/xla_ffi.py (ctypes handlers, no C++) under jax.jit on the
CPU platform — metadata query, execute stage, buffers, errors, vmap — and fp8gemm.jax.matmul's
trace-time checks and lowering to its CUDA FFI target."""
import ctypes

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="jax not installed: the FFI plumbing tests need it")
jnp = pytest.importorskip("jax.numpy")

from fp8gemm import xla_ffi  # noqa: E402

_seen = []


def _host(buf, ctype=ctypes.c_float):
    n = int(np.prod(buf.shape)) if buf.shape else 1
    return np.ctypeslib.as_array(ctypes.cast(buf.ptr, ctypes.POINTER(ctype)), shape=(n,)).reshape(buf.shape)


def _axpy(call):
    _seen.append([(b.dtype, b.shape) for b in call.args + call.rets])
    x, y = (_host(b) for b in call.args)
    if x.shape != y.shape:
        raise ValueError(f"x and y differ in shape: {x.shape} vs {y.shape}")
    _host(call.rets[0])[...] = 2 * x + y


def _boom(call):
    raise ZeroDivisionError("planted failure")


_probe = {}


def _probe_context(call):
    try:
        _probe["stream"] = call.stream()
    except xla_ffi.FfiError as exc:
        _probe["stream_error"] = str(exc)
    _probe["device"] = call.device()


xla_ffi.register("fp8gemm_test_axpy", _axpy, "cpu")
xla_ffi.register("fp8gemm_test_boom", _boom, "cpu")
xla_ffi.register("fp8gemm_test_probe", _probe_context, "cpu")


@pytest.fixture(autouse=True)
def _on_cpu():
    """The handlers above are registered for the CPU platform: on a GPU machine too, these tests
    run there (jax's default device would be the GPU)."""
    with jax.default_device(jax.devices("cpu")[0]):
        yield


def axpy(x, y):
    return jax.ffi.ffi_call("fp8gemm_test_axpy", jax.ShapeDtypeStruct(x.shape, x.dtype),
                            vmap_method="sequential")(x, y)


def test_handler_runs_under_jit_with_buffers_and_dims():
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    y = jnp.full((3, 4), 0.5, jnp.float32)
    _seen.clear()
    out = jax.jit(axpy)(x, y)
    np.testing.assert_array_equal(np.asarray(out), 2 * np.asarray(x) + 0.5)
    assert _seen == [[("float32", (3, 4))] * 3]


def test_vmap_runs_each_batch_member():
    x = jnp.arange(24, dtype=jnp.float32).reshape(2, 3, 4)
    y = jnp.ones((2, 3, 4), jnp.float32)
    _seen.clear()
    out = jax.jit(jax.vmap(axpy))(x, y)
    np.testing.assert_array_equal(np.asarray(out), 2 * np.asarray(x) + 1)
    assert len(_seen) == 2 and _seen[0][0] == ("float32", (3, 4))


def test_python_exceptions_become_xla_errors_with_their_message():
    with pytest.raises(Exception, match="INVALID_ARGUMENT.*x and y differ in shape"):
        jax.block_until_ready(jax.jit(axpy)(jnp.ones((3, 4), jnp.float32), jnp.ones((3, 5), jnp.float32)))
    boom = jax.ffi.ffi_call("fp8gemm_test_boom", jax.ShapeDtypeStruct((2,), jnp.float32))
    with pytest.raises(Exception, match="INTERNAL.*ZeroDivisionError: planted failure"):
        jax.block_until_ready(jax.jit(boom)(jnp.ones((2,), jnp.float32)))


def test_execution_context_queries():
    """DeviceOrdinal_Get answers on every platform; Stream_Get has no stream on the CPU, and its
    XLA error comes back as FfiError with XLA's message (the error object is destroyed)."""
    probe = jax.ffi.ffi_call("fp8gemm_test_probe", jax.ShapeDtypeStruct((1,), jnp.float32))
    _probe.clear()
    jax.block_until_ready(jax.jit(probe)(jnp.ones((1,), jnp.float32)))
    assert _probe["device"] == 0
    assert "XLA_FFI_Stream_Get failed" in _probe["stream_error"] and "not available" in _probe["stream_error"]


def test_dtype_codes_cover_the_operands():
    assert xla_ffi.DTYPES[20] == "float8_e4m3fn" and xla_ffi.DTYPES[16] == "bfloat16"
    assert xla_ffi.DTYPES[11] == "float32" and xla_ffi.DTYPES[6] == "uint8"


def _operands(m=8, n=256, k=512):
    a = jnp.zeros((m, k), jnp.float8_e4m3fn)
    b = jnp.zeros((n, k), jnp.float8_e4m3fn)
    return a, b, jnp.ones((m, k // 128), jnp.float32), jnp.ones((n // 128, k // 128), jnp.float32)


def test_fp8gemm_jax_matmul_shapes_and_lowering():
    import fp8gemm.jax as fj
    a, b, sa, sb = _operands()
    res = jax.eval_shape(fj.matmul, a, b, sa, sb)
    assert res.shape == (8, 256) and res.dtype == jnp.bfloat16
    res32 = jax.eval_shape(lambda *x: fj.matmul(*x, out_dtype="float32"), a, b, sa, sb)
    assert res32.dtype == jnp.float32
    text = jax.jit(fj.matmul).lower(a, b, sa, sb).as_text()
    assert fj.TARGET in text
    with pytest.raises(ValueError, match="a and b must share K"):
        fj.matmul(a, jnp.zeros((256, 256), jnp.float8_e4m3fn), sa, sb)
    with pytest.raises(ValueError, match="out_dtype must be one of"):
        fj.matmul(a, b, sa, sb, out_dtype="int8")


@pytest.mark.parametrize("case,exc,message", [
    ("a_fp32", TypeError, "a must be FP8 E4M3 (float8_e4m3fn) or its uint8/int8 bytes; got dtype float32"),
    ("sa_shape", ValueError, "a_scale must have shape a.shape[:-1] + (ceil(K/128),) = (8, 4); got (8, 3)"),
    ("k100", ValueError, "K must be a positive multiple of 16; got K = 100"),
    ("sb_dtype", TypeError, "b_scale must be float32 (128x128 block scales); got dtype bfloat16"),
])
def test_eval_shape_applies_the_eager_rules(case, exc, message):
    """Trace time (jax.eval_shape, jit) checks kinds and shapes with the eager messages."""
    import re

    import fp8gemm.jax as fj
    a, b, sa, sb = _operands()
    if case == "a_fp32":
        a = jnp.zeros(a.shape, jnp.float32)
    elif case == "sa_shape":
        sa = jnp.ones((8, 3), jnp.float32)
    elif case == "k100":
        a, b = jnp.zeros((8, 100), jnp.float8_e4m3fn), jnp.zeros((256, 100), jnp.float8_e4m3fn)
        sa, sb = jnp.ones((8, 1), jnp.float32), jnp.ones((2, 1), jnp.float32)
    elif case == "sb_dtype":
        sb = sb.astype(jnp.bfloat16)
    with pytest.raises(exc, match=re.escape(message)):
        jax.eval_shape(fj.matmul, a, b, sa, sb)


def test_eval_shape_takes_bytes_and_batch_dims():
    import fp8gemm.jax as fj
    a = jax.ShapeDtypeStruct((2, 4, 256), jnp.uint8)
    b = jax.ShapeDtypeStruct((300, 256), jnp.float8_e4m3fn)
    res = jax.eval_shape(fj.matmul, a, b, jax.ShapeDtypeStruct((2, 4, 2), jnp.float32),
                         jax.ShapeDtypeStruct((3, 2), jnp.float32))
    assert res.shape == (2, 4, 300) and res.dtype == jnp.bfloat16


def _grouped_operands(masked=False, g=4, p=300, n=256, k=512):
    lead = (g, p) if masked else (p,)
    return (jax.ShapeDtypeStruct(lead + (k,), jnp.float8_e4m3fn), jax.ShapeDtypeStruct((g, n, k), jnp.float8_e4m3fn),
            jax.ShapeDtypeStruct(lead + (k // 128,), jnp.float32),
            jax.ShapeDtypeStruct((g, n // 128, k // 128), jnp.float32),
            jax.ShapeDtypeStruct((g if masked else g + 1,), jnp.int32))


@pytest.mark.parametrize("masked", [False, True])
def test_grouped_gemms_under_jit_shapes_lowering_and_rules(masked):
    """The grouped GEMMs trace to their FFI targets with the eager shape rules and messages."""
    import re

    import fp8gemm.jax as fj
    f = fj.grouped_matmul_masked if masked else fj.grouped_matmul_contiguous
    args = _grouped_operands(masked)
    res = jax.eval_shape(lambda *x: f(*x, out_dtype="float16"), *args)
    assert res.shape == ((4, 300, 256) if masked else (300, 256)) and res.dtype == jnp.float16
    assert fj.GROUPED_TARGETS[masked] in jax.jit(f).lower(*args).as_text()
    bad = list(args)
    bad[4] = jax.ShapeDtypeStruct(args[4].shape, jnp.int16)
    name = "counts" if masked else "offsets"
    with pytest.raises(TypeError, match=re.escape(f"{name} must be int32; got dtype int16")):
        jax.eval_shape(f, *bad)
    bad = list(args)
    bad[3] = jax.ShapeDtypeStruct((4, 4, 2), jnp.float32)
    with pytest.raises(ValueError, match=re.escape("b_scale must have shape (G, ceil(N/128), ceil(K/128)) = "
                                                   "(4, 2, 4); got (4, 4, 2)")):
        jax.eval_shape(f, *bad)
    bad = list(args)
    bad[0] = jax.ShapeDtypeStruct(args[0].shape, jnp.float32)
    with pytest.raises(TypeError, match="a must be FP8 E4M3"):
        jax.eval_shape(f, *bad)


def test_quantizers_under_jit_shapes_lowering_and_rules():
    import fp8gemm.jax as fj
    x = jax.ShapeDtypeStruct((3, 5, 300), jnp.bfloat16)
    q, s = jax.eval_shape(fj.quantize_per_token_group, x)
    assert q.shape == (3, 5, 300) and q.dtype == jnp.float8_e4m3fn and s.shape == (3, 5, 3) and s.dtype == jnp.float32
    w = jax.ShapeDtypeStruct((8, 300, 260), jnp.float32)
    q, s = jax.eval_shape(fj.quantize_per_block, w)
    assert q.shape == (8, 300, 260) and q.dtype == jnp.float8_e4m3fn and s.shape == (8, 3, 3)
    assert fj.QUANT_TARGETS["token"] in jax.jit(fj.quantize_per_token_group).lower(x).as_text()
    assert fj.QUANT_TARGETS["block"] in jax.jit(fj.quantize_per_block).lower(w).as_text()
    with pytest.raises(TypeError, match=r"x must be bfloat16, float16 or float32 \(got int8\)"):
        jax.eval_shape(fj.quantize_per_token_group, jax.ShapeDtypeStruct((4, 128), jnp.int8))
    with pytest.raises(ValueError, match="w must be \\[..., N, K\\] \\(at least 2 dimensions\\)"):
        jax.eval_shape(fj.quantize_per_block, jax.ShapeDtypeStruct((128,), jnp.float32))


def test_a_jitted_fp8_layer_traces_into_one_module():
    """quantize -> GEMM -> quantize -> grouped GEMM in one jit: one module holding each target."""
    import fp8gemm.jax as fj

    def layer(x, w, sw, w2, sw2, offsets):
        q, s = fj.quantize_per_token_group(x)
        h = fj.matmul(q, w, s, sw)
        q2, s2 = fj.quantize_per_token_group(h)
        return fj.grouped_matmul_contiguous(q2, w2, s2, sw2, offsets)
    args = (jax.ShapeDtypeStruct((64, 512), jnp.bfloat16), jax.ShapeDtypeStruct((256, 512), jnp.float8_e4m3fn),
            jax.ShapeDtypeStruct((2, 4), jnp.float32), jax.ShapeDtypeStruct((4, 128, 256), jnp.float8_e4m3fn),
            jax.ShapeDtypeStruct((4, 1, 2), jnp.float32), jax.ShapeDtypeStruct((5,), jnp.int32))
    text = jax.jit(layer).lower(*args).as_text()
    for target in (fj.TARGET, fj.QUANT_TARGETS["token"], fj.GROUPED_TARGETS[False]):
        assert target in text
    assert jax.eval_shape(layer, *args).shape == (64, 128)


def test_vmap_over_activations_folds_into_m():
    """vmap of fp8gemm.jax.matmul over a and a_scale (the weights shared) lowers to one custom
    call on a [B, M, K] operand; a batch of weights lowers to a loop of calls."""
    import fp8gemm.jax as fj
    a = jax.ShapeDtypeStruct((3, 32, 512), jnp.float8_e4m3fn)
    sa = jax.ShapeDtypeStruct((3, 32, 4), jnp.float32)
    b = jax.ShapeDtypeStruct((256, 512), jnp.float8_e4m3fn)
    sb = jax.ShapeDtypeStruct((2, 4), jnp.float32)
    folded = jax.jit(jax.vmap(lambda x, s: fj.matmul(x, jnp.zeros(b.shape, b.dtype), s, jnp.ones(sb.shape)),
                              in_axes=(0, 0)))
    text = folded.lower(a, sa).as_text()
    calls = [line for line in text.splitlines() if f"@{fj.TARGET}(" in line]
    assert len(calls) == 1 and "stablehlo.while" not in text
    assert "tensor<3x32x512xf8E4M3FN>" in calls[0] and "tensor<3x32x256xbf16>" in calls[0]
    assert jax.eval_shape(folded, a, sa).shape == (3, 32, 256)
    per_weight = jax.jit(jax.vmap(lambda w, s: fj.matmul(jnp.zeros((32, 512), a.dtype), w, jnp.ones((32, 4)), s)))
    text = per_weight.lower(jax.ShapeDtypeStruct((3, 256, 512), jnp.float8_e4m3fn),
                            jax.ShapeDtypeStruct((3, 2, 4), jnp.float32)).as_text()
    assert "stablehlo.while" in text


def _moe_operands(t=16, h=1024, i=256, e=8, k=2, x_dtype=jnp.bfloat16):
    return (jax.ShapeDtypeStruct((t, h), x_dtype), jax.ShapeDtypeStruct((t, k), jnp.int32),
            jax.ShapeDtypeStruct((t, k), jnp.float32), jax.ShapeDtypeStruct((e, 2 * i, h), jnp.float8_e4m3fn),
            jax.ShapeDtypeStruct((e, 2 * i // 128, h // 128), jnp.float32),
            jax.ShapeDtypeStruct((e, h, i), jnp.float8_e4m3fn), jax.ShapeDtypeStruct((e, h // 128, i // 128), jnp.float32))


def test_moe_under_jit_shapes_lowering_and_rules():
    """fp8gemm.jax.moe traces to the quantizer's and the layer's targets (one per SwiGLU clamp)
    with the eager layer's rules and messages."""
    import re

    import fp8gemm.jax as fj
    args = _moe_operands()
    assert jax.eval_shape(fj.moe, *args).shape == (16, 1024)
    text = jax.jit(fj.moe).lower(*args).as_text()
    assert fj.QUANT_TARGETS["token"] in text and fj.moe_target(10.0) in text
    no_clamp = jax.jit(lambda *a: fj.moe(*a, limit=None)).lower(*args).as_text()
    assert fj.moe_target(None) in no_clamp and fj.moe_target(None) != fj.moe_target(10.0)
    bad = list(args)
    bad[5] = jax.ShapeDtypeStruct((8, 1024, 128), jnp.float8_e4m3fn)
    with pytest.raises(ValueError, match=re.escape("w1 [E, 2I, H] and w2 [E, H, I] disagree: w1 (8, 512, 1024) has E = 8, I = 256; "
                                                "w2 (8, 1024, 128) has E = 8, I = 128")):
        jax.eval_shape(fj.moe, *bad)
    bad = list(args)
    bad[2] = jax.ShapeDtypeStruct((16, 2), jnp.bfloat16)
    with pytest.raises(TypeError, match="topk_weights must be float32; got dtype bfloat16"):
        jax.eval_shape(fj.moe, *bad)
    fp8 = _moe_operands(x_dtype=jnp.float8_e4m3fn)
    with pytest.raises(ValueError, match=re.escape("x_scale must be float32 [T, ceil(H/128)] = (16, 8)")):
        jax.eval_shape(lambda *a: fj.moe(*a, x_scale=jnp.ones((16, 4), jnp.float32)), *fp8)


def test_a_call_placed_on_the_cpu_says_it_needs_the_gpu():
    """XLA's own error was "No FFI handler registered for fp8gemm_matmul on a platform Host"."""
    import fp8gemm.jax as fj
    a = jnp.zeros((4, 128), jnp.float8_e4m3fn)
    b = jnp.zeros((128, 128), jnp.float8_e4m3fn)
    sa, sb = jnp.ones((4, 1), jnp.float32), jnp.ones((1, 1), jnp.float32)
    for f in (fj.matmul, jax.jit(fj.matmul)):
        with pytest.raises(Exception, match="fp8gemm_matmul runs fp8gemm's kernels on an NVIDIA SM90 GPU.*placed on "
                                            "the CPU: put its arrays on the GPU"):
            jax.block_until_ready(f(a, b, sa, sb))
    with pytest.raises(Exception, match="fp8gemm_quantize_per_token_group runs fp8gemm's kernels on an NVIDIA"):
        jax.block_until_ready(jax.jit(fj.quantize_per_token_group)(jnp.ones((4, 128), jnp.float32)))
