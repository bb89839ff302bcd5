"""GPU half of the torch operators' tests: compiled (inductor) against eager bit for bit, CUDA-graph
replay of a compiled model with new data, the vLLM and DeepGEMM adapters against the float64
reference."""
import pytest

from generators import random_case

torch = pytest.importorskip("torch", reason="torch is not installed: the torch operators are not tested")

import fp8gemm  # noqa: E402
import fp8gemm.torch_ops as ops  # noqa: E402
from fp8gemm import reference  # noqa: E402

pytestmark = pytest.mark.gpu


def tensors(m, n, k, seed):
    a, b, sa, sb = random_case(m, n, k, seed=seed).as_torch()
    return a.clone(), b.clone(), sa.clone(), sb.clone()


def mlp(x, w1, s1, w2, s2, bias):
    q, sq = torch.ops.fp8gemm.quantize_per_token_group(x)
    h = torch.nn.functional.silu(ops.matmul(q, w1, sq, s1, bias=bias))
    q2, sq2 = torch.ops.fp8gemm.quantize_per_token_group(h)
    return ops.w8a8_block_fp8_matmul(q2, w2, sq2, s2, [128, 128], torch.bfloat16)


def mlp_args(tokens, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    _, w1, _, s1 = tensors(8, 2048, 1024, seed)
    _, w2, _, s2 = tensors(8, 512, 2048, seed + 1)
    x = torch.randn(tokens, 1024, device="cuda", generator=g, dtype=torch.float32).to(torch.bfloat16)
    bias = torch.randn(2048, device="cuda", generator=g).to(torch.bfloat16)
    return x, w1, s1, w2, s2, bias


def ops_only(x, w1, s1, w2, s2, bias):
    """Our operators back to back (inductor fuses the elementwise code between them in FP32, so
    that part is checked under aot_eager)."""
    q, sq = torch.ops.fp8gemm.quantize_per_token_group(x)
    h = ops.matmul(q, w1, sq, s1)
    q2, sq2 = torch.ops.fp8gemm.quantize_per_token_group(h)
    return ops.matmul(q2, w2, sq2, s2, out_dtype="float32")


@pytest.mark.parametrize("tokens", [1, 37, 256])
@pytest.mark.parametrize("fn,backend", [(ops_only, "inductor"), (mlp, "aot_eager")], ids=["inductor", "aot_eager"])
def test_compiled_matches_eager_bitwise(tokens, fn, backend):
    torch._dynamo.reset()
    args = mlp_args(tokens, 3)
    eager = fn(*args)
    compiled = torch.compile(fn, fullgraph=True, backend=backend)(*args)
    assert compiled.dtype == eager.dtype and compiled.shape == eager.shape
    bits = torch.int32 if eager.dtype == torch.float32 else torch.int16
    assert torch.equal(compiled.view(bits), eager.view(bits)), "compiled differs from eager"


def test_compiled_model_replays_in_a_cuda_graph():
    torch._dynamo.reset()
    args = mlp_args(64, 5)
    new_x = mlp_args(64, 6)[0]
    compiled = torch.compile(mlp, fullgraph=True, backend="aot_eager")
    static = [t.clone() for t in args]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        compiled(*static)                       # compile, plan, warm up on the capture stream
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = compiled(*static)
    static[0].copy_(new_x)
    graph.replay()
    torch.cuda.synchronize()
    want = mlp(new_x, *args[1:])
    assert torch.equal(out.view(torch.int16), want.view(torch.int16)), "replay differs from an eager call"


@pytest.mark.parametrize("m,n,k", [(64, 512, 1024), (200, 300, 1040)])
def test_adapters_match_the_reference(m, n, k):
    import cupy
    case = random_case(m, n, k, seed=9)
    a, b, sa, sb = (t.clone() for t in case.as_torch())
    ref = case.reference(cupy)
    got = ops.w8a8_block_fp8_matmul(a, b, sa, sb, [128, 128], torch.bfloat16)
    assert reference.rel_fro_error(cupy.from_dlpack(got.float()).astype(cupy.float64), ref) <= 4e-3
    d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    sa_mn = sa.t().contiguous().t()                               # DeepGEMM's MN-major A scales
    assert ops.fp8_gemm_nt((a, sa_mn), (b, sb), d) is d
    assert torch.equal(d.view(torch.int16), got.view(torch.int16))
    c = torch.randn(m, n, device="cuda")
    ops.fp8_gemm_nt((a, sa), (b, sb), d, c)
    want = (fp8gemm.matmul(a, b, sa, sb, out_dtype="float32") + c).to(torch.bfloat16)
    assert torch.equal(d.view(torch.int16), want.view(torch.int16))
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    with_bias = ops.matmul(a, b, sa, sb, bias=bias)
    assert torch.equal(with_bias.view(torch.int16), (got + bias).view(torch.int16))
