"""Lab (issue 27): does the CUPTI duration of a short GEMM measure the same thing for our kernel
and DeepGEMM's? lab/stamps.py found, at K = 1024 and N = 512, our CUPTI time 0.6-1.1 us above
DeepGEMM's while the wall time between two marker kernels around the call (and the stamped span
of the grid) was only about one timer tick (0.26 us) longer. Per shape and contender (ours as
dispatched, DeepGEMM's fp8_gemm_nt), L2 flushed before every call:
  cupti  the bench's timer (bench/timing.py: time_calls, in turns)
  graph  CUDA-graph replay (bench/timing.py: time_calls_graph): REPS x [flush, call] minus REPS x
         [flush], median of 7 replays in turns, / REPS (bench/NOTES.md session 35's table came from
         this script's first form, the same graphs captured and replayed one contender at a time)
  gap0 / gap1  from the same CUPTI trace of [flush, spin, marker, call, marker]: the call's first
         kernel start minus the marker's end, the next marker's start minus the call's last
         kernel end (medians): where CUPTI puts the kernel's edges between its neighbours.
Usage: python lab/graph_vs_cupti.py OUT.json   (SHAPES="M,N,K;..." overrides)"""
import json
import os
import statistics
import sys

import cupy
import numpy as np
import torch

import fp8gemm
from fp8gemm.bench.peers import Inputs, prepare_deepgemm
from fp8gemm.bench.timing import FLUSH_KERNEL, L2Flush, _device_activities, time_calls, time_calls_graph, turns
from fp8gemm.testing import random_case

REPS = 20
MARK = r"""
extern "C" __global__ void lab_mark(unsigned long long spin_ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    if (spin_ns) {
        do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < spin_ns);
    }
}
"""


def shapes():
    env = os.environ.get("SHAPES")
    if env:
        return [tuple(int(x) for x in s.split(",")) for s in env.split(";") if s]
    return [(24, 512, 1024), (128, 512, 1024), (512, 512, 1024), (48, 4096, 1024), (256, 1536, 1024),
            (64, 8192, 1024), (512, 4096, 1024), (64, 4096, 4096), (128, 4096, 4096), (4096, 4096, 4096)]


def edges(fns, flush, iters):
    """{name: (gap0, gap1)} medians in us (see the module docstring)."""
    mark = cupy.RawKernel(MARK, "lab_mark")
    spin = np.uint64(300_000)
    order = turns(list(fns), iters)
    stream = torch.cuda.current_stream().cuda_stream
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for name in order:
            flush(stream)
            with cupy.cuda.ExternalStream(stream):
                mark((1,), (1,), (spin,))
                mark((1,), (1,), (np.uint64(0),))
            fns[name]()
            with cupy.cuda.ExternalStream(stream):
                mark((1,), (1,), (np.uint64(0),))
        torch.cuda.synchronize()
    rounds, cur = [], None
    for start, dur, name in _device_activities(prof):
        if FLUSH_KERNEL in name:
            cur = []
            rounds.append(cur)
        elif cur is not None:
            cur.append((start, start + dur, "lab_mark" in name))
    per = {}
    for name, r in zip(order, rounds):
        marks = [e for e in r if e[2]]
        own = [e for e in r if not e[2]]
        if len(marks) != 3 or not own:
            continue
        per.setdefault(name, []).append(((own[0][0] - marks[1][1]) / 1e3, (marks[2][0] - own[-1][1]) / 1e3))
    return {n: (statistics.median(g[0] for g in v), statistics.median(g[1] for g in v)) for n, v in per.items()}


def main(out):
    flush = L2Flush()
    results = {}
    print(f"{'shape':>18} {'who':>9} {'cupti':>8} {'graph':>8} {'gap0':>7} {'gap1':>7}")
    for m, n, k in shapes():
        x = Inputs(random_case(m, n, k, seed=1), "bfloat16")
        fns = {"ours": lambda x=x: fp8gemm.matmul(x.a, x.b, x.sa, x.sb)}
        try:
            fns["deepgemm"] = prepare_deepgemm(x)["fp8_gemm_nt"]
        except Exception as exc:       # noqa: BLE001 (reported, the row goes on without it)
            print(f"deepgemm unavailable: {type(exc).__name__}: {exc}")
        for f in fns.values():
            f()
        torch.cuda.synchronize()
        cupti = time_calls(fns, flush, 15)
        gaps = edges(fns, flush, 15)
        graph = time_calls_graph(fns, flush, 7, REPS)
        for who in fns:
            g = graph[who]
            gap0, gap1 = gaps.get(who, (float("nan"), float("nan")))
            results[f"{m}x{n}x{k} {who}"] = {"cupti": cupti[who], "graph": g, "gap0": gap0, "gap1": gap1}
            print(f"{str((m, n, k)):>18} {who:>9} {cupti[who]:8.2f} {g:8.2f} {gap0:7.2f} {gap1:7.2f}", flush=True)
    with open(out, "w") as fh:
        json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
