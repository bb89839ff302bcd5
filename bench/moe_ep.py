"""Expert-parallel MoE benchmark: ``python -m fp8gemm.bench.moe_ep --gpus 2`` (or fp8gemm-bench
--moe-ep). One process per GPU in an NCCL group; each rank holds E / W experts of V4-Flash or
-Pro and T / W of the T tokens (tokens = T over all ranks), routing uniform or skewed
(fp8gemm.bench.moe.route over all E experts). Per rank and row: the median of CUDA-event times
of fp8gemm.moe_ep's phases (quantize + dispatch, the rank's layer, combine) over ``iters``
calls, and on rank 0 the one-GPU layer (fp8gemm.moe, all experts) on the same T tokens (rank 0's
rows checked against it); the
goal of the issue: each rank's layer time <= 0.6 of the one-GPU time at T >= 2048. Needs W GPUs
(NCCL's NVLink multicast stays off: NCCL_NVLS_ENABLE=0)."""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import tempfile

from .moe import MODELS, ROUTINGS, TOP_K, fp8_bytes, route

FIELDS = ("world", "model", "routing", "tokens", "rank", "dispatch_us", "layer_us", "combine_us", "total_us",
          "one_gpu_us", "ratio", "rel_err")
LAYER_TOL = 1e-2      # the rank's rows against the one-GPU layer's (both bf16, FP8 intermediates)


def parse(argv=None):
    p = argparse.ArgumentParser(prog="python -m fp8gemm.bench.moe_ep", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=2, help="ranks, one GPU each (default 2)")
    p.add_argument("--models", default="flash", help="comma-separated: flash, pro")
    p.add_argument("--tokens", default="2048,8192", help="comma-separated T over all ranks")
    p.add_argument("--routings", default=",".join(ROUTINGS), help="comma-separated: uniform, skewed")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--csv", default=None, help="write the rows here (rank 0)")
    a = p.parse_args(argv)
    a.models = a.models.split(",")
    a.tokens = [int(t) for t in a.tokens.split(",")]
    a.routings = a.routings.split(",")
    for m in a.models:
        if m not in MODELS:
            p.error(f"unknown model {m!r} (choose from {', '.join(MODELS)})")
    for r in a.routings:
        if r not in ROUTINGS:
            p.error(f"unknown routing {r!r} (choose from {', '.join(ROUTINGS)})")
    for t in a.tokens:
        if t % a.gpus:
            p.error(f"tokens {t} must divide by the {a.gpus} ranks")
    for m in a.models:
        if MODELS[m][0] % a.gpus:
            p.error(f"{m}'s {MODELS[m][0]} experts must divide by the {a.gpus} ranks")
    return a


def _weights(experts, hidden, inter, first, count, seed):
    """Experts first .. first + count - 1 of a model: FP8 bytes and block scales (torch, this GPU);
    expert e's weights depend only on (seed, e), so ranks and the one-GPU layer agree."""
    import cupy
    import torch
    f8 = torch.float8_e4m3fn
    parts = {"w1": [], "s1": [], "w2": [], "s2": []}
    for e in range(first, first + count):
        rng = cupy.random.RandomState(seed * 100003 + e)
        parts["w1"].append(torch.from_dlpack(fp8_bytes((2 * inter, hidden), rng)).view(f8))
        parts["w2"].append(torch.from_dlpack(fp8_bytes((hidden, inter), rng)).view(f8))
        # |FP8 byte values| ~ 40 on average: scales that keep each GEMM's outputs ~ 1
        parts["s1"].append(torch.full((2 * inter // 128, -(-hidden // 128)), 1.0 / (40 * hidden ** 0.5), device="cuda"))
        parts["s2"].append(torch.full((-(-hidden // 128), inter // 128), 1.0 / (40 * inter ** 0.5), device="cuda"))
    return tuple(torch.stack(parts[k]) for k in ("w1", "s1", "w2", "s2"))


def _median_phases(call, iters):
    import torch
    spans = []
    for _ in range(iters):
        events = []
        call(events)
        torch.cuda.synchronize()
        spans.append([a.elapsed_time(b) * 1e3 for a, b in zip(events, events[1:])])
    return [statistics.median(s[i] for s in spans) for i in range(len(spans[0]))]


def _one_gpu_us(x, ids, wts, weights, iters):
    """(median us, the result) of the one-GPU layer with every expert."""
    import torch

    import fp8gemm
    out = fp8gemm.moe(x, ids, wts, *weights)
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fp8gemm.moe(x, ids, wts, *weights)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times), out


def worker(rank, args, init):
    import numpy as np
    import torch
    import torch.distributed as dist

    from fp8gemm.moe_ep import moe_ep
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init}", rank=rank, world_size=args.gpus)
    rows = []
    for model in args.models:
        experts, hidden, inter = MODELS[model]
        local = experts // args.gpus
        mine = _weights(experts, hidden, inter, rank * local, local, seed=1)
        everything = _weights(experts, hidden, inter, 0, experts, seed=1) if rank == 0 else None
        for routing in args.routings:
            for total in args.tokens:
                t = total // args.gpus
                rng = np.random.default_rng(7)
                ids_all = route(rng, total, experts, routing)
                wts_all = (rng.random((total, TOP_K)) + 0.1).astype(np.float32)
                x_all = torch.randn(total, hidden, device="cuda", generator=torch.Generator("cuda").manual_seed(3))
                x_all = x_all.to(torch.bfloat16)
                sl = slice(rank * t, (rank + 1) * t)
                ids = torch.from_numpy(ids_all[sl]).cuda()
                wts = torch.from_numpy(wts_all[sl]).cuda()
                x = x_all[sl].contiguous()
                call = lambda ev: moe_ep(x, ids, wts, *mine, events=ev)   # noqa: E731
                call(None)
                torch.cuda.synchronize()
                dispatch, layer, combine = _median_phases(call, args.iters)
                err = None
                one = None
                if rank == 0:
                    one, ref = _one_gpu_us(x_all, torch.from_numpy(ids_all).cuda(), torch.from_numpy(wts_all).cuda(),
                                           everything, args.iters)
                    got, want = call(None).double(), ref[sl].double()
                    err = float(torch.linalg.norm(got - want) / torch.linalg.norm(want))
                    if not err <= LAYER_TOL:
                        raise RuntimeError(f"{model} {routing} T={total}: rank 0's rows differ from the one-GPU "
                                           f"layer's by {err:.3e} > {LAYER_TOL}")
                total_us = dispatch + layer + combine
                rows.append(dict(world=args.gpus, model=model, routing=routing, tokens=total, rank=rank,
                                 dispatch_us=round(dispatch, 2), layer_us=round(layer, 2), combine_us=round(combine, 2),
                                 total_us=round(total_us, 2), one_gpu_us=None if one is None else round(one, 2),
                                 ratio=None if one is None else round(total_us / one, 3),
                                 rel_err=None if err is None else float(f"{err:.3e}")))
    gathered = [None] * args.gpus
    dist.all_gather_object(gathered, rows)
    if rank == 0:
        allrows = [r for part in gathered for r in part]
        print(format_rows(allrows))
        if args.csv:
            with open(args.csv, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=FIELDS)
                w.writeheader()
                w.writerows(allrows)
    dist.destroy_process_group()


def format_rows(rows) -> str:
    head = f"{'model':6} {'routing':8} {'tokens':>6} {'rank':>4} {'dispatch':>9} {'layer':>9} {'combine':>9} " \
           f"{'total':>9} {'1 GPU':>9} {'ratio':>6}"
    lines = [head]
    for r in rows:
        one = "" if r["one_gpu_us"] is None else f"{r['one_gpu_us']:9.1f}"
        ratio = "" if r["ratio"] is None else f"{r['ratio']:6.3f}"
        lines.append(f"{r['model']:6} {r['routing']:8} {r['tokens']:6d} {r['rank']:4d} {r['dispatch_us']:9.1f} "
                     f"{r['layer_us']:9.1f} {r['combine_us']:9.1f} {r['total_us']:9.1f} {one:>9} {ratio:>6}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse(argv)
    from .cli import require_gpu
    require_gpu("the expert-parallel benchmark")
    import torch
    import torch.multiprocessing as mp
    if torch.cuda.device_count() < args.gpus:
        print(f"the expert-parallel benchmark needs {args.gpus} GPUs; this machine has "
              f"{torch.cuda.device_count()}", file=sys.stderr)
        return 2
    init = os.path.join(tempfile.mkdtemp(prefix="fp8gemm-ep-"), "init")
    mp.spawn(worker, args=(args, init), nprocs=args.gpus, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
