"""The torch operators (fp8gemm.torch_ops): fake kernels on meta and fake CUDA tensors, the same
messages as eager, torch.compile(fullgraph=True) with no graph break, the vLLM and DeepGEMM
adapters. CPU only (meta / fake tensors); the GPU half is tests/test_torch_ops_gpu.py."""
import re

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the torch operators are not tested")

import fp8gemm.torch_ops as ops  # noqa: E402

E4M3 = torch.float8_e4m3fn


def operands(m=64, n=512, k=1024, device="meta", dtype=E4M3):
    kb, nb = -(-k // 128), -(-n // 128)
    return (torch.empty(m, k, dtype=dtype, device=device), torch.empty(n, k, dtype=E4M3, device=device),
            torch.empty(m, kb, dtype=torch.float32, device=device),
            torch.empty(nb, kb, dtype=torch.float32, device=device))


@pytest.mark.parametrize("out_dtype,want", [("bfloat16", torch.bfloat16), ("float16", torch.float16),
                                            ("float32", torch.float32), ("bf16", torch.bfloat16)])
def test_matmul_fake_shape_and_dtype(out_dtype, want):
    a, b, sa, sb = operands()
    c = torch.ops.fp8gemm.matmul(a, b, sa, sb, out_dtype)
    assert c.shape == (64, 512) and c.dtype == want and c.device.type == "meta"


def test_batch_dims_and_fake_cuda_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        a = torch.empty(2, 3, 256, dtype=E4M3, device="cuda")
        sa = torch.empty(2, 3, 2, dtype=torch.float32, device="cuda")
        b = torch.empty(300, 256, dtype=E4M3, device="cuda")
        sb = torch.empty(3, 2, dtype=torch.float32, device="cuda")
        c = ops.matmul(a, b, sa, sb)
        assert c.shape == (2, 3, 300) and c.dtype == torch.bfloat16 and c.device.type == "cuda"


@pytest.mark.parametrize("case,exc,message", [
    ("k100", ValueError, "K must be a positive multiple of 16; got K = 100"),
    ("a_fp32", TypeError, "a must be FP8 E4M3 (float8_e4m3fn) or its uint8/int8 bytes; got dtype float32"),
    ("e5m2", TypeError, "a is float8_e5m2; fp8gemm takes FP8 E4M3 (float8_e4m3fn)"),
    ("sa_shape", ValueError, "a_scale must have shape a.shape[:-1] + (ceil(K/128),) = (64, 8); got (64, 7)"),
    ("sb_shape", ValueError, "b_scale must have shape (ceil(N/128), ceil(K/128)) = (4, 8); got (8, 4)"),
    ("out_dtype", ValueError, "out_dtype"),
    ("cpu", ValueError, "a is on the CPU; fp8gemm needs CUDA arrays on one GPU"),
])
def test_fake_kernel_raises_the_eager_messages(case, exc, message):
    """Trace time applies the eager rules (fp8gemm.validate) with their messages."""
    a, b, sa, sb = operands()
    dt = "bfloat16"
    if case == "k100":
        a, b, sa, sb = operands(k=100)
    elif case == "a_fp32":
        a = torch.empty(64, 1024, dtype=torch.float32, device="meta")
    elif case == "e5m2":
        a = torch.empty(64, 1024, dtype=torch.float8_e5m2, device="meta")
    elif case == "sa_shape":
        sa = torch.empty(64, 7, dtype=torch.float32, device="meta")
    elif case == "sb_shape":
        sb = torch.empty(8, 4, dtype=torch.float32, device="meta")
    elif case == "out_dtype":
        dt = "int8"
    elif case == "cpu":
        a, b, sa, sb = operands(device="cpu")
    with pytest.raises(exc, match=re.escape(message)):
        torch.ops.fp8gemm.matmul(a, b, sa, sb, dt)


def test_eager_validation_gives_the_same_message():
    """The eager path's message for the same bad shape (the rule is shared, not copied)."""
    from fp8gemm.intake import TORCH, Tensor
    from fp8gemm.validate import validate_gemm
    spec = lambda name, dt, shape: Tensor(name, 0, dt, shape, (shape[-1], 1) if len(shape) == 2 else (1,), 0,
                                          TORCH, False, None)
    with pytest.raises(ValueError) as eager:
        validate_gemm(spec("a", "float8_e4m3fn", (64, 1024)), spec("b", "float8_e4m3fn", (512, 1024)),
                      spec("a_scale", "float32", (64, 7)), spec("b_scale", "float32", (4, 8)), None, None)
    a, b, sa, sb = operands()
    with pytest.raises(ValueError) as traced:
        torch.ops.fp8gemm.matmul(a, b, torch.empty(64, 7, dtype=torch.float32, device="meta"), sb, "bfloat16")
    assert str(eager.value) == str(traced.value)


def test_matmul_out_checks_out():
    a, b, sa, sb = operands()
    ok = torch.empty(64, 512, dtype=torch.float16, device="meta")
    torch.ops.fp8gemm.matmul_out(a, b, sa, sb, ok)
    with pytest.raises(ValueError, match=r"out must have shape \(64, 512\); got \(64, 511\)"):
        torch.ops.fp8gemm.matmul_out(a, b, sa, sb, torch.empty(64, 511, dtype=torch.float16, device="meta"))
    with pytest.raises(TypeError, match="out must be bfloat16, float16 or float32; got dtype int32"):
        torch.ops.fp8gemm.matmul_out(a, b, sa, sb, torch.empty(64, 512, dtype=torch.int32, device="meta"))


def test_quantizer_fake():
    q, s = torch.ops.fp8gemm.quantize_per_token_group(torch.empty(4, 5, 300, dtype=torch.bfloat16, device="meta"))
    assert q.shape == (4, 5, 300) and q.dtype == E4M3 and s.shape == (4, 5, 3) and s.dtype == torch.float32
    with pytest.raises(TypeError, match="x must be bfloat16, float16 or float32"):
        torch.ops.fp8gemm.quantize_per_token_group(torch.empty(4, 8, dtype=torch.int8, device="meta"))


def mlp(x, w1, s1, w2, s2, bias):
    """A two-layer FP8 MLP as a serving engine would write it."""
    q, sq = torch.ops.fp8gemm.quantize_per_token_group(x)
    h = ops.matmul(q, w1, sq, s1, out_dtype=torch.bfloat16, bias=bias)
    h = torch.nn.functional.silu(h)
    q2, sq2 = torch.ops.fp8gemm.quantize_per_token_group(h)
    return ops.w8a8_block_fp8_matmul(q2, w2, sq2, s2, [128, 128], torch.bfloat16)


def _mlp_args(device="meta"):
    return (torch.empty(16, 1024, dtype=torch.bfloat16, device=device),
            torch.empty(2048, 1024, dtype=E4M3, device=device), torch.empty(16, 8, dtype=torch.float32, device=device),
            torch.empty(512, 2048, dtype=E4M3, device=device), torch.empty(4, 16, dtype=torch.float32, device=device),
            torch.empty(2048, dtype=torch.bfloat16, device=device))


def test_torch_compile_fullgraph_has_no_graph_break():
    torch._dynamo.reset()
    args = _mlp_args()
    explained = torch._dynamo.explain(mlp)(*args)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    out = torch.compile(mlp, fullgraph=True, backend="aot_eager")(*args)
    assert out.shape == (16, 512) and out.dtype == torch.bfloat16


def test_compiled_out_variant_and_deepgemm_form():
    torch._dynamo.reset()
    a, b, sa, sb = operands()

    def f(a, b, sa, sb, d):
        return ops.fp8_gemm_nt((a, sa), (b, sb), d)
    d = torch.empty(64, 512, dtype=torch.bfloat16, device="meta")
    assert torch.compile(f, fullgraph=True, backend="aot_eager")(a, b, sa, sb, d).shape == (64, 512)
    c = torch.empty(64, 512, dtype=torch.float32, device="meta")
    assert ops.fp8_gemm_nt((a, sa), (b, sb), d, c) is d


def test_vllm_form_refuses_other_block_sizes():
    a, b, sa, sb = operands()
    with pytest.raises(ValueError, match="block_size must be"):
        ops.w8a8_block_fp8_matmul(a, b, sa, sb, [64, 64], torch.bfloat16)


def test_eager_quantizer_refuses_cpu_torch_tensors_clearly():
    import fp8gemm
    with pytest.raises(ValueError, match=r"x is a torch tensor on cpu; pass a CUDA tensor"):
        fp8gemm.quantize_per_token_group(torch.zeros(4, 128))
