"""One rank of the expert-parallel tests (tests/test_moe_ep.py): a CPU process in a gloo group,
fp8gemm.moe_ep with a host stand-in for the GPU layer (moe_reference in float64, rounded to bf16).
Usage: python ep_worker.py RANK WORLD INIT_FILE OUT.npz CASE"""
import sys

import numpy as np
import torch
import torch.distributed as dist

from fp8gemm import moe_reference, reference
from fp8gemm.moe_ep import moe_ep

E, H, I, K = 8, 256, 128, 2


def weights():
    """All E experts' weights, the same on every rank (one seed)."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((E, 2 * I, H)).astype(np.float32) * (3.0 / np.sqrt(H))
    w2 = rng.standard_normal((E, H, I)).astype(np.float32) * (0.3 / np.sqrt(I))
    q1, s1 = zip(*(reference.quantize_per_block(w) for w in w1))
    q2, s2 = zip(*(reference.quantize_per_block(w) for w in w2))
    return np.stack(q1), np.stack(s1), np.stack(q2), np.stack(s2)


def host_layer(rows, ids, wts, w1, w1_scale, w2, w2_scale, x_scale=None, limit=None):
    """fp8gemm.moe's contract on the host: rows whose id is outside 0..E_local-1 give zeros."""
    ids_np = ids.numpy().astype(np.int64)
    local = w1.shape[0]
    ok = (ids_np >= 0) & (ids_np < local)
    safe = np.where(ok, ids_np, 0)
    w = np.where(ok, wts.numpy(), 0.0)
    out = moe_reference.moe(rows.numpy().view(reference.FP8_E4M3), safe, w, w1.numpy().view(reference.FP8_E4M3),
                            w1_scale.numpy(), w2.numpy().view(reference.FP8_E4M3), w2_scale.numpy(),
                            x_scale=x_scale.numpy(), limit=limit)
    return torch.from_numpy(out.astype(np.float32)).to(torch.bfloat16)


def routing(case, rank, t):
    rng = np.random.default_rng(100 + rank)
    if case == "skewed":                       # every pair to rank 1's experts
        ids = np.stack([rng.choice(np.arange(4, 8), K, replace=False) for _ in range(t)])
    else:
        ids = np.stack([rng.choice(E, K, replace=False) for _ in range(t)])
    if case == "dropped":                      # ids outside 0..E-1 drop their pair
        ids[0, 0], ids[1, 1] = -1, E + 3
    return ids.astype(np.int64), (rng.random((t, K)) + 0.1).astype(np.float32)


def main(rank, world, init_file, out_path, case):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    q1, s1, q2, s2 = weights()
    local = E // world
    mine = slice(rank * local, (rank + 1) * local)
    t = {"uneven": 3 + 4 * rank}.get(case, 6)
    ids, wts = routing(case, rank, t)
    x = np.random.default_rng(200 + rank).standard_normal((t, H)).astype(np.float32)
    xq, xs = reference.quantize_per_token_group(x)
    cap = 7 * K if case == "uneven" else None           # unequal T: one capacity for every rank
    runs = [moe_ep(torch.from_numpy(xq.view(np.uint8)), torch.from_numpy(ids), torch.from_numpy(wts),
                   torch.from_numpy(q1[mine].view(np.uint8)), torch.from_numpy(s1[mine]),
                   torch.from_numpy(q2[mine].view(np.uint8)), torch.from_numpy(s2[mine]),
                   x_scale=torch.from_numpy(xs), capacity=cap, local_layer=host_layer) for _ in range(2)]
    ok = (ids >= 0) & (ids < E)
    want = moe_reference.moe(xq, np.where(ok, ids, 0), np.where(ok, wts, 0.0), q1, s1, q2, s2, x_scale=xs)
    np.savez(out_path, got=runs[0].float().numpy(), again=runs[1].float().numpy(), want=want)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
