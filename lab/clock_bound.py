"""Lab (issue 55, the 1500 TFLOP/s goal): is it within reach at the clock the board runs a large
FP8 GEMM at? For each shape: our dispatcher's pick, DeepGEMM (its TMA-aligned M-major As) and
cuBLASLt FP8 with per-tensor scales (torch._scaled_mm: the same tensor-core work with no per-block
promotion, the ceiling a block-scaled kernel cannot pass on this board), L2 cold.
  python lab/clock_bound.py time OUT.json [ITERS]   CUPTI medians (bench/timing.py), one process
  python lab/clock_bound.py ncu [CALLS]             each contender CALLS times with a flush before
                                                    each: run it under ncu --clock-control none for the
                                                    SM clock and cycles of each kernel (lab/device_clock.sh)
CLOCK_SHAPES="M,N,K;M,N,K" overrides the shapes."""
import json
import os
import sys

import torch

import fp8gemm
from fp8gemm.bench.timing import L2Flush, time_calls

sys.path.insert(0, os.path.dirname(__file__))
from dense_ab import contenders  # noqa: E402

SHAPES = [(8192, 8192, 4096), (16384, 8192, 4096), (4096, 8192, 4096)]
if os.environ.get("CLOCK_SHAPES"):
    SHAPES = [tuple(int(x) for x in s.split(",")) for s in os.environ["CLOCK_SHAPES"].split(";")]


def all_contenders(m, n, k):
    import deep_gemm
    a, b, sa, sb, _, fns = contenders(deep_gemm, m, n, k)
    one = torch.ones((), dtype=torch.float32, device="cuda")
    # per-tensor scales: cuBLASLt's plain FP8 GEMM (no block scales, no promotion)
    fns["cublaslt_per_tensor"] = lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one,
                                                         out_dtype=torch.bfloat16)
    for name, fn in fns.items():         # every contender runs once before it is timed or profiled
        fn()
    torch.cuda.synchronize()
    return fns


def time_main(out_path, iters=20):
    flush = L2Flush()
    rows = []
    for m, n, k in SHAPES:
        fns = all_contenders(m, n, k)
        times = time_calls(fns, flush, iters)
        flops = 2.0 * m * n * k
        for name, us in times.items():
            rows.append({"m": m, "n": n, "k": k, "name": name, "us": us, "tflops": flops / us / 1e6})
            print(f"{m:6d} {n:5d} {k:5d} {name:22s} {us:9.2f} us {flops / us / 1e6:7.1f} TFLOP/s", flush=True)
    json.dump(rows, open(out_path, "w"), indent=1)


def ncu_main(calls=3):
    flush = L2Flush()
    stream = torch.cuda.current_stream().cuda_stream
    for m, n, k in SHAPES:
        fns = all_contenders(m, n, k)
        for _ in range(calls):
            for fn in fns.values():
                flush(stream)
                fn()
        torch.cuda.synchronize()
        print(f"shape {m}x{n}x{k}: {', '.join(fns)}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "time":
        time_main(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 20)
    else:
        ncu_main(int(sys.argv[2]) if len(sys.argv) > 2 else 3)
