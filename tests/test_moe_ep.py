"""fp8gemm.moe_ep on CPU processes: two gloo ranks exchange FP8 rows through all_to_all_single,
a host stand-in computes each rank's experts, and every rank's output matches the float64 layer
over its own tokens with all experts (uniform, skewed, dropped pairs, unequal token counts with
one capacity), bit for bit the same on a second call."""
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the expert-parallel layer is not tested")

MOE_TOL = 1e-2
WORKER = os.path.join(os.path.dirname(__file__), "ep_worker.py")


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with gloo is not available")
@pytest.mark.parametrize("case", ["uniform", "skewed", "dropped", "uneven"])
def test_two_ranks_match_the_single_layer(tmp_path, case):
    world = 2
    init = tmp_path / "init"
    procs = [subprocess.Popen([sys.executable, WORKER, str(r), str(world), str(init), str(tmp_path / f"r{r}.npz"),
                               case], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    for p in procs:
        out, _ = p.communicate(timeout=240)
        assert p.returncode == 0, out[-3000:]
    for r in range(world):
        res = np.load(tmp_path / f"r{r}.npz")
        got, want = res["got"].astype(np.float64), res["want"]
        assert np.isfinite(got).all() and float(np.abs(want).max()) > 0
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err <= MOE_TOL, f"rank {r}: relative error {err:.3e}"
        assert np.array_equal(res["got"], res["again"]), f"rank {r}: a second call differs"


@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed with gloo is not available")
def test_bad_input_is_refused_before_any_exchange(tmp_path):
    """A world of one in this process: x with another row count than topk_ids, mismatched
    weights and a zero capacity raise ValueError naming the argument."""
    import torch.distributed as dist

    from fp8gemm.moe_ep import moe_ep
    group = None                                                # the default group
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    try:
        x = torch.zeros(4, 256, dtype=torch.uint8)
        xs = torch.ones(4, 2)
        ids, w = torch.zeros(4, 2, dtype=torch.int64), torch.ones(4, 2)
        weights = (torch.zeros(2, 256, 256, dtype=torch.uint8), torch.ones(2, 2, 2),
                   torch.zeros(2, 256, 128, dtype=torch.uint8), torch.ones(2, 2, 1))
        with pytest.raises(ValueError, match=r"x must be \[T, H\] with T = 4"):
            moe_ep(x[:3], ids, w, *weights, x_scale=xs[:3], group=group)
        with pytest.raises(ValueError, match="topk_weights must have topk_ids' shape"):
            moe_ep(x, ids, w[:, :1], *weights, x_scale=xs, group=group)
        with pytest.raises(ValueError, match="capacity must be >= 1"):
            moe_ep(x, ids, w, *weights, x_scale=xs, capacity=0, group=group)
    finally:
        dist.destroy_process_group()
