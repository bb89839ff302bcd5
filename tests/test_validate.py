"""CPU: every validation rule raises the right exception naming the argument; good inputs pass.

Tensors here are descriptions (no memory): validation only reads pointers, shapes and strides.
"""
import pytest

from fp8gemm.intake import Tensor
from fp8gemm.validate import check_block_size, normalize_out_dtype, validate_gemm

_next_ptr = [1 << 32]


def T(name, dtype, shape, strides=None, device=0, ptr=None, framework="cupy", read_only=False):
    if strides is None:
        strides, acc = [], 1
        for d in reversed(shape):
            strides.append(acc)
            acc *= d
        strides = tuple(reversed(strides))
    if ptr is None:
        ptr = _next_ptr[0]
        _next_ptr[0] += 1 << 28
    return Tensor(name, ptr, dtype, tuple(shape), tuple(strides), device, framework, read_only, None)


def good(m=64, n=256, k=512, **over):
    kb, nb = -(-k // 128), -(-n // 128)
    args = dict(a=T("a", "float8_e4m3fn", (m, k)), b=T("b", "uint8", (n, k)),
                sa=T("a_scale", "float32", (m, kb)), sb=T("b_scale", "float32", (nb, kb)),
                out=None, out_dtype=None)
    args.update(over)
    return args


def run(**kw):
    return validate_gemm(kw["a"], kw["b"], kw["sa"], kw["sb"], kw["out"], kw["out_dtype"])


def test_good_problem():
    p = run(**good())
    assert (p.m, p.n, p.k, p.out_dtype, p.lda, p.ldb) == (64, 256, 512, "bfloat16", 512, 512)
    assert (p.sa_stride_m, p.sa_stride_k, p.sb_stride_n, p.sb_stride_k) == (4, 1, 4, 1)
    assert p.out_shape == (64, 256)


def test_batch_dims_flatten():
    a = T("a", "int8", (2, 3, 512))
    sa = T("a_scale", "float32", (2, 3, 4))
    p = run(**good(a=a, sa=sa))
    assert p.m == 6 and p.out_shape == (2, 3, 256) and p.lda == 512 and p.sa_stride_m == 4


def test_m_major_and_transposed_scales_read_in_place():
    sa = T("a_scale", "float32", (64, 4), strides=(1, 64))
    sb = T("b_scale", "float32", (2, 4), strides=(1, 2))
    p = run(**good(sa=sa, sb=sb))
    assert (p.sa_stride_m, p.sa_stride_k, p.sb_stride_n, p.sb_stride_k) == (1, 64, 1, 2)


def test_tails_and_m_zero():
    p = run(**good(m=3, n=200, k=144))
    assert (p.m, p.n, p.k) == (3, 200, 144)
    p0 = run(**good(m=0))
    assert p0.m == 0 and p0.out_shape == (0, 256)


def test_single_row_stride_is_free():
    a = T("a", "uint8", (1, 48), strides=(7, 1))
    p = run(**good(m=1, k=48, a=a, sa=T("a_scale", "float32", (1, 1))))
    assert p.lda % 16 == 0


BAD = [
    # (what to change, exception, message fragment)
    (dict(a=T("a", "float16", (64, 512))), TypeError, "a must be FP8 E4M3"),
    (dict(b=T("b", "float8_e5m2", (256, 512))), TypeError, "b is float8_e5m2"),
    (dict(b=T("b", "float32", (256, 512))), TypeError, "b must be FP8"),
    (dict(sa=T("a_scale", "float16", (64, 4))), TypeError, "a_scale must be float32"),
    (dict(sb=T("b_scale", "bfloat16", (2, 4))), TypeError, "b_scale must be float32"),
    (dict(sa=T("a_scale", "float32", (64, 3))), ValueError, "a_scale must have shape"),
    (dict(sa=T("a_scale", "float32", (4, 64))), ValueError, "a_scale must have shape"),
    (dict(sb=T("b_scale", "float32", (2, 3))), ValueError, "b_scale must have shape"),
    (dict(sb=T("b_scale", "float32", (1, 4))), ValueError, "b_scale must have shape"),
    (dict(b=T("b", "uint8", (256, 256))), ValueError, "a and b must share K"),
    (dict(b=T("b", "uint8", (2, 256, 512))), ValueError, "b must have shape"),
    (dict(a=T("a", "uint8", (64, 520)), b=T("b", "uint8", (256, 520)),
          sa=T("a_scale", "float32", (64, 5)), sb=T("b_scale", "float32", (2, 5))),
     ValueError, "K must be a positive multiple of 16"),
    (dict(b=T("b", "uint8", (0, 512)), sb=T("b_scale", "float32", (0, 4))), ValueError, "N >= 1"),
    (dict(a=T("a", "uint8", (64, 512), device=None)), ValueError, "a is on the CPU"),
    (dict(sb=T("b_scale", "float32", (2, 4), device=None)), ValueError, "b_scale is on the CPU"),
    (dict(b=T("b", "uint8", (256, 512), device=1)), ValueError, "b is on GPU 1"),
    (dict(a=T("a", "uint8", (64, 512), strides=(1, 64))), ValueError, "a must be contiguous along K"),
    (dict(b=T("b", "uint8", (256, 512), strides=(520, 1))), ValueError, "multiple of 16 bytes"),
    (dict(a=T("a", "uint8", (64, 512), ptr=(1 << 40) + 8)), ValueError, "16-byte aligned"),
    (dict(a=T("a", "uint8", (2, 32, 512), strides=(40000, 512, 1)),
          sa=T("a_scale", "float32", (2, 32, 4))), ValueError, "cannot be flattened"),
    (dict(out=T("out", "bfloat16", (64, 255))), ValueError, "out must have shape"),
    (dict(out=T("out", "float16", (64, 256)), out_dtype="bfloat16"), TypeError, "out has dtype float16"),
    (dict(out=T("out", "int32", (64, 256))), TypeError, "out must be bfloat16"),
    (dict(out=T("out", "float32", (64, 256), strides=(1, 64))), ValueError, "out must be contiguous along N"),
    (dict(out=T("out", "float32", (64, 256), read_only=True)), ValueError, "out is read-only"),
    (dict(out=T("out", "float32", (64, 256), framework="jax")), TypeError, "JAX arrays are immutable"),
    (dict(out=T("out", "float32", (64, 256), strides=(100, 1))), ValueError, "rows overlap"),
    (dict(out=T("out", "float32", (64, 256), device=1)), ValueError, "out is on GPU 1"),
    (dict(out_dtype="int8"), ValueError, "out_dtype must be one of"),
    (dict(out_dtype="float8_e4m3fn"), ValueError, "out_dtype must be one of"),
    (dict(a=T("a", "uint8", ())), ValueError, "a must have shape"),
    (dict(b=T("b", "uint8", (512,))), ValueError, "b must have shape"),
    (dict(a=T("a", "uint8", (64, 0)), b=T("b", "uint8", (256, 0)), sa=T("a_scale", "float32", (64, 0)),
          sb=T("b_scale", "float32", (2, 0))), ValueError, "K must be a positive multiple of 16"),
    (dict(sa=T("a_scale", "float64", (64, 4))), TypeError, "a_scale must be float32"),
    (dict(sa=T("a_scale", "float32", (64, 4), device=None)), ValueError, "a_scale is on the CPU"),
]


@pytest.mark.parametrize("change,exc,msg", BAD, ids=[b[2] + f"-{i}" for i, b in enumerate(BAD)])
def test_bad_inputs(change, exc, msg):
    with pytest.raises(exc, match=msg):
        run(**good(**change))


def test_out_aliasing_an_input_is_refused():
    a = T("a", "uint8", (64, 512))
    out = T("out", "float32", (64, 256), ptr=a.ptr + 1024)
    with pytest.raises(ValueError, match="out overlaps a"):
        run(**good(a=a, out=out))


def test_out_dtype_names():
    assert normalize_out_dtype("bf16") == "bfloat16"
    assert normalize_out_dtype("float32") == "float32"
    import numpy as np
    assert normalize_out_dtype(np.float16) == "float16"
    assert normalize_out_dtype(np.dtype("float32")) == "float32"
    import ml_dtypes
    assert normalize_out_dtype(ml_dtypes.bfloat16) == "bfloat16"


@pytest.mark.parametrize("bs", [(128, 64), (64, 128), [128], "128", None])
def test_block_size_refused(bs):
    with pytest.raises(ValueError, match="block_size must be"):
        check_block_size(bs)
    check_block_size([128, 128])


def test_explain_applies_matmuls_rules_and_messages():
    """fp8gemm.explain refuses what matmul refuses, with matmul's messages, and names no kernel
    where matmul launches none."""
    import fp8gemm
    with pytest.raises(ValueError, match="K must be a positive multiple of 16; got K = 4001"):
        fp8gemm.explain(16, 4096, 4001)
    with pytest.raises(ValueError, match="K must be a positive multiple of 16; got K = 0"):
        fp8gemm.explain(16, 4096, 0)
    with pytest.raises(ValueError, match="b must have N >= 1 rows"):
        fp8gemm.explain(16, 0, 4096)
    with pytest.raises(ValueError, match="M must be a non-negative integer; got -1"):
        fp8gemm.explain(-1, 4096, 4096)
    with pytest.raises(ValueError, match="M must be a non-negative integer; got 1.5"):
        fp8gemm.explain(1.5, 4096, 4096)
    with pytest.raises(ValueError, match="out_dtype must be one of bfloat16, float16, float32; got 'int8'"):
        fp8gemm.explain(16, 4096, 4096, out_dtype="int8")
    with pytest.raises(ValueError, match="M and N must be < 2"):
        fp8gemm.explain(2**31, 4096, 4096)
    assert "no kernel" in fp8gemm.explain(0, 4096, 4096)
    assert "fp16" not in fp8gemm.explain(16, 4096, 4096, out_dtype="fp16")      # aliases normalized
    assert "float16" in fp8gemm.explain(16, 4096, 4096, out_dtype="fp16")
