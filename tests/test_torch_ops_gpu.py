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


# ---- grouped GEMMs and the MoE layer through the operators ------------------------------------

def _torch(x):
    return torch.from_dlpack(x)


def _grouped_inputs(sizes, n, k, seed):
    from test_grouped_gpu import contiguous_case
    a, sa, b, sb, offsets = contiguous_case(sizes, n, k, seed)
    fp8 = torch.float8_e4m3fn
    return (_torch(a).view(fp8).clone(), _torch(b).view(fp8).clone(), _torch(sa).clone(), _torch(sb).clone(),
            _torch(offsets).clone())


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_grouped_ops_equal_eager_and_compile(out_dtype):
    """The operators' results equal the eager functions' bit for bit, compiled (inductor) too; the
    masked form on the same rows laid out per group."""
    torch._dynamo.reset()
    sizes = [0, 1, 65, 130, 0, 64]
    a, b, sa, sb, offsets = _grouped_inputs(sizes, 384, 1024, 11)
    eager = fp8gemm.grouped_matmul_contiguous(a, b, sa, sb, offsets, out_dtype=out_dtype)
    got = ops.grouped_matmul_contiguous(a, b, sa, sb, offsets, out_dtype=out_dtype)
    bits = torch.int32 if out_dtype == "float32" else torch.int16
    rows = slice(0, sum(sizes))                       # rows outside the groups are not written
    assert torch.equal(got[rows].view(bits), eager[rows].view(bits))
    f = torch.compile(lambda *t: ops.grouped_matmul_contiguous(*t, out_dtype=out_dtype), fullgraph=True)
    assert torch.equal(f(a, b, sa, sb, offsets)[rows].view(bits), eager[rows].view(bits))
    out = torch.zeros_like(eager)
    ops.grouped_matmul_contiguous(a, b, sa, sb, offsets, out=out)
    assert torch.equal(out[rows].view(bits), eager[rows].view(bits))

    g, max_rows = len(sizes), max(sizes)
    am = torch.zeros(g, max_rows, a.shape[1], dtype=torch.uint8, device="cuda").view(a.dtype)
    sam = torch.ones(g, max_rows, sa.shape[1], dtype=torch.float32, device="cuda")
    start = 0
    for e, c in enumerate(sizes):
        am[e, :c], sam[e, :c] = a[start:start + c], sa[start:start + c]
        start += c
    counts = torch.tensor(sizes, dtype=torch.int32, device="cuda")
    masked = ops.grouped_matmul_masked(am, b, sam, sb, counts, out_dtype=out_dtype, expected_rows=sum(sizes))
    start = 0
    for e, c in enumerate(sizes):
        assert torch.equal(masked[e, :c].view(bits), eager[start:start + c].view(bits))
        start += c


def _moe_inputs(tokens, seed):
    import numpy as np
    from test_moe_gpu import routing, torch_layer
    experts, hidden, inter = 8, 384, 256
    _, weights = torch_layer(experts, hidden, inter, seed)
    ids, w = routing(tokens, experts, 2, False, seed)
    x = torch.from_numpy(np.random.default_rng(seed).standard_normal((tokens, hidden)).astype(np.float32))
    return x.to(torch.bfloat16).cuda(), torch.from_numpy(ids).cuda(), torch.from_numpy(w).cuda(), weights


@pytest.mark.parametrize("tokens", [1, 40, 300])
def test_moe_op_equals_eager_compiled_and_replayed(tokens):
    """fp8gemm::moe equals fp8gemm.moe bit for bit, eager and under torch.compile; a compiled
    block captured in a CUDA graph replays with new tokens and routing."""
    torch._dynamo.reset()
    x, ids, w, weights = _moe_inputs(tokens, 21)
    eager = fp8gemm.moe(x, ids, w, *weights)
    assert torch.equal(ops.moe(x, ids, w, *weights).view(torch.int16), eager.view(torch.int16))
    block = torch.compile(lambda x, ids, w: ops.moe(x, ids, w, *weights), fullgraph=True, backend="aot_eager")
    assert torch.equal(block(x, ids, w).view(torch.int16), eager.view(torch.int16))

    static = [t.clone() for t in (x, ids, w)]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        block(*static)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = block(*static)
    x2, ids2, w2, _ = _moe_inputs(tokens, 22)
    for buf, new in zip(static, (x2, ids2, w2)):
        buf.copy_(new)
    graph.replay()
    torch.cuda.synchronize()
    want = fp8gemm.moe(x2, ids2, w2, *weights)
    assert torch.equal(out.view(torch.int16), want.view(torch.int16)), "replay differs from an eager call"


def test_deepgemm_grouped_forms_equal_ours():
    """m_grouped_fp8_gemm_nt_contiguous with DeepGEMM's m_indices layout (each group's rows padded
    to 128) and _masked give the eager grouped GEMMs' bits on every real row."""
    a, b, sa, sb, _ = _grouped_inputs([3, 0, 130], 256, 512, 17)
    rows = [(0, 3), (128, 128), (128, 258)]                    # each group's real rows in the padded layout
    p = 384
    ap = torch.zeros(p, a.shape[1], dtype=torch.uint8, device="cuda").view(a.dtype)
    sap = torch.ones(p, sa.shape[1], dtype=torch.float32, device="cuda")
    m_indices = torch.full((p,), -1, dtype=torch.int32, device="cuda")
    src = 0
    for g, (lo, hi) in enumerate(rows):
        ap[lo:hi], sap[lo:hi] = a[src:src + hi - lo], sa[src:src + hi - lo]
        m_indices[lo:hi] = g
        src += hi - lo
    d = torch.empty(p, 256, dtype=torch.bfloat16, device="cuda")
    assert ops.m_grouped_fp8_gemm_nt_contiguous((ap, sap), (b, sb), d, m_indices) is d
    want = fp8gemm.grouped_matmul_contiguous(ap, b, sap, sb, [0, 128, 128, 384])
    for lo, hi in rows:
        assert torch.equal(d[lo:hi].view(torch.int16), want[lo:hi].view(torch.int16))
    am = ap.view(3, 128, -1)[[0, 0, 1]].clone()                 # masked: [G, max_m, K]
    sam = sap.view(3, 128, -1)[[0, 0, 1]].clone()
    counts = torch.tensor([3, 0, 128], dtype=torch.int32, device="cuda")
    dm = torch.empty(3, 128, 256, dtype=torch.bfloat16, device="cuda")
    ops.m_grouped_fp8_gemm_nt_masked((am, sam), (b, sb), dm, counts, 64)
    assert torch.equal(dm[0, :3].view(torch.int16), want[0:3].view(torch.int16))
    assert torch.equal(dm[2].view(torch.int16), want[128:256].view(torch.int16))
