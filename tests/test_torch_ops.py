"""The torch operators (fp8gemm.torch_ops): fake kernels on meta and fake CUDA tensors, the same
messages as eager, torch.compile(fullgraph=True) with no graph break, the vLLM and DeepGEMM
adapters. CPU only (meta / fake tensors); the GPU half is tests/test_torch_ops_gpu.py."""
import re

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the torch operators are not tested")

import fp8gemm  # noqa: E402
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


# ---- grouped GEMMs and the MoE layer ----------------------------------------------------------

def grouped_operands(g=4, p=300, n=512, k=1024, masked=False, device="meta"):
    kb, nb = -(-k // 128), -(-n // 128)
    lead = (g, p) if masked else (p,)
    return (torch.empty(*lead, k, dtype=E4M3, device=device), torch.empty(g, n, k, dtype=E4M3, device=device),
            torch.empty(*lead, kb, dtype=torch.float32, device=device),
            torch.empty(g, nb, kb, dtype=torch.float32, device=device),
            torch.empty(g if masked else g + 1, dtype=torch.int32, device=device))


@pytest.mark.parametrize("masked", [False, True])
def test_grouped_fakes_shape_and_dtype(masked):
    a, b, sa, sb, groups = grouped_operands(masked=masked)
    if masked:
        c = torch.ops.fp8gemm.grouped_matmul_masked(a, b, sa, sb, groups, "float16", 64)
        assert c.shape == (4, 300, 512) and c.dtype == torch.float16
        out = torch.empty(4, 300, 512, dtype=torch.bfloat16, device="meta")
        assert ops.grouped_matmul_masked(a, b, sa, sb, groups, out=out) is out
    else:
        c = torch.ops.fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, groups, "float32", False)
        assert c.shape == (300, 512) and c.dtype == torch.float32
        out = torch.empty(300, 512, dtype=torch.bfloat16, device="meta")
        assert ops.grouped_matmul_contiguous(a, b, sa, sb, groups, out=out) is out


@pytest.mark.parametrize("case,exc,message", [
    ("b_rank", ValueError, "b must have shape [G, N, K] (one weight matrix per group); got shape (512, 1024)"),
    ("sb_shape", ValueError, "b_scale must have shape (G, ceil(N/128), ceil(K/128)) = (4, 4, 8); got (4, 8, 4)"),
    ("offsets_dtype", TypeError, "offsets must be int32; got dtype int64"),
    ("offsets_shape", ValueError, "offsets must have shape (5,) (offsets of G = 4 groups); got (4,)"),
    ("a_rank", ValueError, "a must have shape [P, K] (all groups' rows, group by group); got (2, 150, 1024)"),
    ("a_fp32", TypeError, "a must be FP8 E4M3 (float8_e4m3fn) or its uint8/int8 bytes; got dtype float32"),
    ("sa_shape", ValueError, "a_scale must have shape a.shape[:-1] + (ceil(K/128),) = (300, 8); got (300, 7)"),
    ("cpu_offsets", ValueError, "offsets is on the CPU; fp8gemm needs CUDA arrays on one GPU"),
    ("out_shape", ValueError, "out must have shape (300, 512); got (300, 256)"),
])
def test_grouped_fake_raises_the_eager_messages(case, exc, message):
    a, b, sa, sb, offsets = grouped_operands()
    out = None
    if case == "b_rank":
        b = torch.empty(512, 1024, dtype=E4M3, device="meta")
    elif case == "sb_shape":
        sb = torch.empty(4, 8, 4, dtype=torch.float32, device="meta")
    elif case == "offsets_dtype":
        offsets = torch.empty(5, dtype=torch.int64, device="meta")
    elif case == "offsets_shape":
        offsets = torch.empty(4, dtype=torch.int32, device="meta")
    elif case == "a_rank":
        a = torch.empty(2, 150, 1024, dtype=E4M3, device="meta")
    elif case == "a_fp32":
        a = torch.empty(300, 1024, dtype=torch.float32, device="meta")
    elif case == "sa_shape":
        sa = torch.empty(300, 7, dtype=torch.float32, device="meta")
    elif case == "cpu_offsets":
        offsets = torch.zeros(5, dtype=torch.int32)
    elif case == "out_shape":
        out = torch.empty(300, 256, dtype=torch.bfloat16, device="meta")
    with pytest.raises(exc, match=re.escape(message)):
        ops.grouped_matmul_contiguous(a, b, sa, sb, offsets, out=out)


def test_grouped_layout_rule_is_the_eager_one():
    """validate_grouped raises the same message for the same bad offsets (one shared rule)."""
    from fp8gemm.intake import TORCH, Tensor
    from fp8gemm.validate import validate_grouped

    def t(name, dt, shape):
        strides, acc = [], 1
        for d in reversed(shape):
            strides.insert(0, acc)
            acc *= d
        return Tensor(name, 0, dt, shape, tuple(strides), 0, TORCH, False, None)
    args = (t("a", "float8_e4m3fn", (300, 1024)), t("b", "float8_e4m3fn", (4, 512, 1024)),
            t("a_scale", "float32", (300, 8)), t("b_scale", "float32", (4, 4, 8)), t("offsets", "int32", (4,)))
    with pytest.raises(ValueError) as eager:
        validate_grouped(*args, None, None, False)
    a, b, sa, sb, _ = grouped_operands()
    with pytest.raises(ValueError) as fake:
        ops.grouped_matmul_contiguous(a, b, sa, sb, torch.empty(4, dtype=torch.int32, device="meta"))
    assert str(eager.value) == str(fake.value)


def moe_operands(t=16, h=1024, i=256, e=8, k=2, device="meta", fp8=False):
    x = torch.empty(t, h, dtype=E4M3 if fp8 else torch.bfloat16, device=device)
    return dict(x=x, topk_ids=torch.empty(t, k, dtype=torch.int32, device=device),
                topk_weights=torch.empty(t, k, dtype=torch.float32, device=device),
                w1=torch.empty(e, 2 * i, h, dtype=E4M3, device=device),
                w1_scale=torch.empty(e, -(-2 * i // 128), -(-h // 128), dtype=torch.float32, device=device),
                w2=torch.empty(e, h, i, dtype=E4M3, device=device),
                w2_scale=torch.empty(e, -(-h // 128), i // 128, dtype=torch.float32, device=device))


def test_moe_fake_shape():
    args = moe_operands()
    y = ops.moe(**args)
    assert y.shape == (16, 1024) and y.dtype == torch.bfloat16
    fp8 = moe_operands(fp8=True)
    y = ops.moe(**fp8, x_scale=torch.empty(16, 8, dtype=torch.float32, device="meta"), limit=None)
    assert y.shape == (16, 1024)


@pytest.mark.parametrize("case,exc,message", [
    ("fp8_no_scale", TypeError, "x is FP8 (float8_e4m3fn) but x_scale is None: pass its per-token-group scales as "
                                "x_scale="),
    ("ids_dtype", TypeError, "topk_ids must be int32 or int64; got dtype float32"),
    ("weights_shape", ValueError, "topk_weights must have topk_ids' shape (16, 2); got (16, 3)"),
    ("inter", ValueError, "I (w1.shape[1] / 2) must be a positive multiple of 128; got 100"),
    ("w2_shape", ValueError, "w1 [E, 2I, H] and w2 [E, H, I] disagree: w1 (8, 512, 1024) has E = 8, I = 256; "
                             "w2 (8, 1024, 128) has E = 8, I = 128"),
    ("w1_shape", ValueError, "w1 [E, 2I, H] and w2 [E, H, I] disagree: w1 (4, 512, 1024) has E = 4"),
    ("w2_hidden", ValueError, "w2 must be [E, H, I] = (8, 1024, 256); got (8, 512, 256)"),
    ("w1_scale", ValueError, "b_scale must have shape (G, ceil(N/128), ceil(K/128)) = (8, 4, 8); got (8, 4, 4)"),
    ("x_scale", ValueError, "x_scale must be float32 [T, ceil(H/128)] = (16, 8); got float32 (16, 4)"),
])
def test_moe_fake_raises_the_eager_messages(case, exc, message):
    args = moe_operands()
    x_scale = None
    if case == "fp8_no_scale":
        args = moe_operands(fp8=True)
    elif case == "ids_dtype":
        args["topk_ids"] = torch.empty(16, 2, dtype=torch.float32, device="meta")
    elif case == "weights_shape":
        args["topk_weights"] = torch.empty(16, 3, dtype=torch.float32, device="meta")
    elif case == "inter":
        args = moe_operands(i=100)
        args["w1_scale"] = torch.empty(8, 2, 8, dtype=torch.float32, device="meta")
    elif case == "w2_shape":
        args["w2"] = torch.empty(8, 1024, 128, dtype=E4M3, device="meta")
    elif case == "w1_shape":
        args["w1"] = torch.empty(4, 512, 1024, dtype=E4M3, device="meta")
    elif case == "w2_hidden":
        args["w2"] = torch.empty(8, 512, 256, dtype=E4M3, device="meta")
    elif case == "w1_scale":
        args["w1_scale"] = torch.empty(8, 4, 4, dtype=torch.float32, device="meta")
    elif case == "x_scale":
        args = moe_operands(fp8=True)
        x_scale = torch.empty(16, 4, dtype=torch.float32, device="meta")
    with pytest.raises(exc, match=re.escape(message)):
        ops.moe(**args, x_scale=x_scale)


def test_compiled_moe_block_has_no_graph_break():
    """A DeepSeek-style block: router top-k in torch, the MoE layer and a shared-expert GEMM
    through the operators, one graph under torch.compile(fullgraph=True)."""
    torch._dynamo.reset()
    args = moe_operands()
    gate = torch.empty(8, 1024, dtype=torch.bfloat16, device="meta")
    shared = torch.empty(1024, 1024, dtype=E4M3, device="meta")
    shared_scale = torch.empty(8, 8, dtype=torch.float32, device="meta")

    def block(x, gate, w1, w1_scale, w2, w2_scale, shared, shared_scale):
        weights, ids = torch.topk(torch.softmax((x @ gate.t()).float(), -1), 2)
        y = ops.moe(x, ids.to(torch.int32), weights, w1, w1_scale, w2, w2_scale)
        q, sq = torch.ops.fp8gemm.quantize_per_token_group(x)
        return y + ops.matmul(q, shared, sq, shared_scale)

    call = (args["x"], gate, args["w1"], args["w1_scale"], args["w2"], args["w2_scale"], shared, shared_scale)
    explained = torch._dynamo.explain(block)(*call)
    assert explained.graph_break_count == 0, explained.break_reasons
    out = torch.compile(block, fullgraph=True, backend="aot_eager")(*call)
    assert out.shape == (16, 1024) and out.dtype == torch.bfloat16


def test_offsets_from_deepgemm_m_indices():
    """DeepGEMM's m_indices (each row's group, -1 on alignment padding) -> our offsets: a group's
    padding rows inside its span, empty groups as empty spans, leading and trailing padding."""
    def offsets(rows, g):
        return ops.offsets_from_m_indices(torch.tensor(rows, dtype=torch.int32), g).tolist()
    assert offsets([0, 0, -1, -1, 1, 1, 1, -1], 2) == [0, 4, 8]
    assert offsets([0, -1, 2, 2, -1, -1], 4) == [0, 2, 2, 6, 6]            # groups 1 and 3 empty
    assert offsets([-1, -1, 1, 1], 3) == [0, 2, 4, 4]                      # group 0 empty, leading padding
    assert offsets([], 2) == [0, 0, 0]
    assert offsets([3, 3, 3], 4) == [0, 0, 0, 0, 3]


def test_deepgemm_grouped_forms_trace():
    """DeepGEMM's grouped call forms run through the operators (meta tensors: shapes, no break)."""
    a, b, sa, sb, _ = grouped_operands()
    d = torch.empty(300, 512, dtype=torch.bfloat16, device="meta")
    m_indices = torch.empty(300, dtype=torch.int32, device="meta")
    assert ops.m_grouped_fp8_gemm_nt_contiguous((a, sa), (b, sb), d, m_indices) is d
    am, bm, sam, sbm, counts = grouped_operands(masked=True)
    dm = torch.empty(4, 300, 512, dtype=torch.bfloat16, device="meta")
    assert ops.m_grouped_fp8_gemm_nt_masked((am, sam), (bm, sbm), dm, counts, 64) is dm


def test_vllm_adapter_has_vllms_signature_and_defaults():
    """vLLM: w8a8_block_fp8_matmul(A, B, As, Bs, block_size, output_dtype=torch.float16)."""
    import inspect
    params = inspect.signature(ops.w8a8_block_fp8_matmul).parameters
    assert list(params)[:6] == ["A", "B", "As", "Bs", "block_size", "output_dtype"]
    assert params["block_size"].default is inspect.Parameter.empty
    assert params["output_dtype"].default is torch.float16
    assert params["bias"].kind is inspect.Parameter.KEYWORD_ONLY


def test_eager_call_on_meta_tensors_says_meta_not_cpu():
    a = torch.empty(16, 256, dtype=E4M3, device="meta")
    b = torch.empty(256, 256, dtype=E4M3, device="meta")
    sa, sb = torch.empty(16, 2, device="meta"), torch.empty(2, 2, device="meta")
    with pytest.raises(ValueError, match="a is a meta tensor .*call the torch.ops.fp8gemm operators"):
        fp8gemm.matmul(a, b, sa, sb)


def test_a_rule_error_under_fake_tensors_is_not_also_logged():
    """torch's fake mode logged ours as "fake tensor raised TypeError" with a ~30-line traceback."""
    import subprocess
    import sys
    code = ("import torch, fp8gemm.torch_ops as ops\n"
            "from torch._subclasses.fake_tensor import FakeTensorMode\n"
            "with FakeTensorMode():\n"
            "    a = torch.empty(16, 256, dtype=torch.bfloat16, device='meta')\n"
            "    b = torch.empty(256, 256, dtype=torch.float8_e4m3fn, device='meta')\n"
            "    try:\n"
            "        ops.matmul(a, b, torch.empty(16, 2, device='meta'), torch.empty(2, 2, device='meta'))\n"
            "    except TypeError as exc:\n"
            "        print('RAISED', exc)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "RAISED a must be FP8 E4M3" in res.stdout, res.stderr[-2000:]
    assert "fake tensor raised TypeError" not in res.stderr and "Traceback" not in res.stderr, res.stderr[-2000:]
