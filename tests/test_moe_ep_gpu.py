"""fp8gemm.moe_ep on the GPU with a world of one (NCCL): the per-rank path (quantize, dispatch
into fixed slots, all_to_all_single, the rank's fp8gemm.moe, combine) against the float64 layer;
the same bits on a second call; captured in a CUDA graph and replayed with new tokens and routing.
Two or more GPUs: tests/test_multi_gpu.py's machines (not lent so far)."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from fp8gemm import moe_reference  # noqa: E402
from fp8gemm.moe_ep import moe_ep  # noqa: E402
from test_moe_gpu import MOE_TOL, rel_err, routing, to_f64, torch_layer  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    import torch.distributed as dist
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")          # NVLink multicast stays off (KINDS.md)
    if not dist.is_nccl_available():
        pytest.skip("torch.distributed has no NCCL here")
    init = tmp_path_factory.mktemp("ep") / "init"
    dist.init_process_group("nccl", init_method=f"file://{init}", rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


def _inputs(tokens, seed, experts=8):
    ids, w = routing(tokens, experts, 2, seed % 2 == 1, seed=seed)
    ids[0, 0] = -1                                              # a dropped pair
    x = np.random.default_rng(seed + 3).standard_normal((tokens, 256)).astype(np.float32)
    return x, ids, w


def _want(x, ids, w, host):
    q1, s1, q2, s2 = host
    xb = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    ok = ids >= 0
    return moe_reference.moe(xb, np.where(ok, ids, 0), np.where(ok, w, 0.0), q1, s1, q2, s2)


@pytest.mark.parametrize("tokens", [1, 37, 300])
def test_world_of_one_matches_the_layer(group, tokens):
    host, weights = torch_layer(8, 256, 128, seed=tokens)
    x, ids, w = _inputs(tokens, tokens)
    args = (torch.from_numpy(x).to(torch.bfloat16).cuda(), torch.from_numpy(ids).cuda(), torch.from_numpy(w).cuda())
    out = moe_ep(*args, *weights, group=group)
    assert out.shape == (tokens, 256) and out.dtype == torch.bfloat16
    assert rel_err(to_f64(out), _want(x, ids, w, host)) <= MOE_TOL
    assert torch.equal(moe_ep(*args, *weights, group=group).view(torch.int16), out.view(torch.int16))


def test_cuda_graph_replays_new_routing(group):
    host, weights = torch_layer(8, 256, 128, seed=5)
    x, ids, w = _inputs(24, 5)
    static = [torch.from_numpy(x).to(torch.bfloat16).cuda(), torch.from_numpy(ids).cuda(), torch.from_numpy(w).cuda()]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        moe_ep(*static, *weights, group=group)                   # warm-up: kernels, plans
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = moe_ep(*static, *weights, group=group)
    x2, ids2, w2 = _inputs(24, 6)
    for buf, new in zip(static, (torch.from_numpy(x2).to(torch.bfloat16), torch.from_numpy(ids2), torch.from_numpy(w2))):
        buf.copy_(new)
    graph.replay()
    torch.cuda.synchronize()
    assert rel_err(to_f64(out), _want(x2, ids2, w2, host)) <= MOE_TOL
    eager = moe_ep(*static, *weights, group=group)
    assert torch.equal(out.view(torch.int16), eager.view(torch.int16)), "replay differs from an eager call"
