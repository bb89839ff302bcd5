"""Where MoE prefill time goes (issue 8): the grouped GEMM (contiguous layout, fp16 out) on the
DeepSeek-V4 L1 shapes with every expert given the same row count -- 128 (one full 128-row tile),
129 (a second tile holding one row), 192 (Flash's mean at 8192 tokens), 256 (two full tiles) --
and with the bench's uniform routing of 8192 tokens. Prints device time (CUPTI, L2 flushed before
each call, median of 5), useful TFLOP/s, the HBM floor of the weights read once, and the compute
floor of the useful FLOPs at the FP8 dense ceiling measured in the run. With --wg3 each case
also runs on the three-warpgroup kernel's grouped mode (192-row tiles, asked for as fp8gemm.moe does; dispatch/grouped.py: WG3_ROWS
forced on), and the outputs are compared bit for bit.
Usage: python lab/exp_moe_prefill.py"""
import sys

import cupy
import numpy as np

from fp8gemm.bench.cli import measure_ceilings
from fp8gemm.bench.moe import fp8_bytes, route
from fp8gemm.bench.timing import L2Flush, time_calls

LAYERS = [("flash L1", 256, 4096, 4096), ("pro L1", 384, 6144, 7168)]   # name, experts, N, K


def main():
    flush = L2Flush()
    ceil = measure_ceilings(flush, 10)
    bw, peak = ceil["copy_bandwidth_bytes_per_s"], ceil["fp8_dense_peak_flops"]
    print(f"copy {bw / 1e12:.2f} TB/s, FP8 dense {peak / 1e12:.0f} TFLOP/s", flush=True)
    grng = cupy.random.RandomState(5)
    for name, experts, n, k in LAYERS:
        w = fp8_bytes((experts, n, k), grng)
        s = cupy.full((experts, n // 128, k // 128), 1.0 / (64 * k ** 0.5), dtype=cupy.float32)
        rng = np.random.default_rng(7)
        ids = route(rng, 8192, experts, "uniform")
        routed = np.bincount(ids.reshape(-1), minlength=experts)
        cases = {f"{r} rows each": np.full(experts, r) for r in (128, 129, 160, 192, 256)}
        cases["uniform 8192 tokens"] = routed
        fns, info, outs = {}, {}, {}
        from fp8gemm.grouped import run_grouped
        kinds = ("general", "wg3") if "--wg3" in sys.argv else ("general",)
        for label, counts in cases.items():
            rows = int(counts.sum())
            a = fp8_bytes((rows, k), grng)
            sa = cupy.full((rows, k // 128), 1.0 / 64, dtype=cupy.float32)
            offsets = cupy.asarray(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
            for kind in kinds:
                tile = kind == "wg3"             # True: 192-row tiles; False: never
                out = cupy.empty((rows, n), dtype=cupy.float16)
                key = f"{label} {kind}"
                fns[key] = (lambda a=a, sa=sa, o=offsets, out=out, w=w, s=s, tile=tile:
                            run_grouped(a, w, sa, s, o, "offsets", False, None, out, (128, 128), None, True, tile))
                fns[key]()
                outs[key] = out
                info[key] = label
            flops = 2.0 * rows * n * k
            tiles = int(np.sum(-(-counts // 128)))
            for key in [k2 for k2, v in info.items() if v == label]:
                info[key] = (flops, tiles, int(counts.max()))
        cupy.cuda.Device().synchronize()
        us = time_calls(fns, flush, 5)
        hbm = experts * n * k / bw * 1e6
        for label, t in us.items():
            flops, tiles, mx = info[label]
            same = ""
            if label.endswith(" wg3"):
                same = " bitwise=" + str(bool((outs[label].view(cupy.uint16) == outs[label[:-4] + " general"].view(cupy.uint16)).all()))
            print(f"{name:8} {label:30} {t:9.1f} us  useful {flops / t / 1e6:6.0f} TFLOP/s  128-row tiles/expert "
                  f"{tiles / experts:.2f} (max rows {mx})  floors: weights once {hbm:7.1f} us, compute "
                  f"{flops / peak * 1e6:7.1f} us{same}", flush=True)
        del w


if __name__ == "__main__":
    main()
