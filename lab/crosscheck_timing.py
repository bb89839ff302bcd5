"""Cross-check the benchmark's CUPTI timer with CUDA-graph replay on a few shapes.

Graph method: capture 20 x [L2 flush, call] and 20 x [L2 flush] alone; per-call time =
(replay time of the first - replay time of the second) / 20, each the median of 5 replays.
Usage: python lab/crosscheck_timing.py"""
import statistics

import torch

import fp8gemm
from fp8gemm.bench.peers import Inputs, prepare_cublaslt
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.testing import random_case

SHAPES = [(4, 512, 256), (64, 4096, 256), (16, 4096, 4096), (512, 4096, 1024), (4096, 4096, 4096)]
REPS = 20


def graph_time(fn, flush):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        flush(s.cuda_stream)
    torch.cuda.synchronize()

    def capture(with_fn):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for _ in range(REPS):
                flush(s.cuda_stream)
                if with_fn:
                    fn()
        return g

    def replay_ms(g):
        times = []
        for _ in range(5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            g.replay()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        return statistics.median(times)

    g_both, g_flush = capture(True), capture(False)
    return (replay_ms(g_both) - replay_ms(g_flush)) / REPS * 1000.0


flush = L2Flush()
print(f"{'shape':>18} | {'ours CUPTI':>10} {'ours graph':>10} | {'cuBLASLt CUPTI':>14} {'cuBLASLt graph':>14}")
for m, n, k in SHAPES:
    case = random_case(m, n, k, seed=3)
    x = Inputs(case, "bfloat16")
    ours = lambda: fp8gemm.matmul(x.a, x.b, x.sa, x.sb)   # noqa: E731
    calls = prepare_cublaslt(x)
    cub = None
    for label, fn in calls.items():
        try:
            fn()
            torch.cuda.synchronize()
            cub = fn
            break
        except Exception:
            continue
    fns = {"ours": ours}
    if cub:
        fns["cub"] = cub
    t = time_calls(fns, flush, 20)
    g_ours = graph_time(ours, flush)
    g_cub = graph_time(cub, flush) if cub else float("nan")
    print(f"{str((m, n, k)):>18} | {t['ours']:10.2f} {g_ours:10.2f} | {t.get('cub', float('nan')):14.2f} "
          f"{g_cub:14.2f}", flush=True)
