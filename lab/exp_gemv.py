"""The decode kernel (sm90_fp8_gemm_gemv) against the dispatcher's current choice on decode
shapes: CUPTI device time, L2 flushed before each call, median of 20 (the bench's timer), each
gemv configuration the tuner tries, with each output checked against the dispatcher's.
Usage: python lab/exp_gemv.py [--m 1,2,4,8,16] [--nk 512x4096,...]"""
import sys

import torch

import fp8gemm
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import Gemv, select
from fp8gemm.testing import random_case

NK = [(512, 1024), (512, 4096), (1536, 1024), (1536, 4096), (4096, 1024), (4096, 4096), (8192, 1024),
      (8192, 4096), (4096, 256), (2048, 7168)]
CONFIGS = [(8, 2), (8, 1), (4, 2), (4, 4)]


def main():
    ms = [1, 2, 4, 8, 16]
    nk = NK
    if "--m" in sys.argv:
        ms = [int(v) for v in sys.argv[sys.argv.index("--m") + 1].split(",")]
    if "--nk" in sys.argv:
        nk = [tuple(int(v) for v in s.split("x")) for s in sys.argv[sys.argv.index("--nk") + 1].split(",")]
    flush = L2Flush()
    rows = []
    for n, k in nk:
        for m in ms:
            case = random_case(m, n, k, seed=m + n + k)
            a, b, sa, sb = case.as_torch()
            cands = {"dispatch": select(m, n, k)}
            for warps, unroll in CONFIGS:
                cands[f"gemv w{warps} u{unroll}"] = Gemv(8 if m <= 8 else 16, warps, unroll)
            outs = {name: torch.empty(m, n, dtype=torch.bfloat16, device="cuda") for name in cands}
            fns = {name: (lambda c=c, o=outs[name]: fp8gemm.matmul(a, b, sa, sb, out=o, config=c))
                   for name, c in cands.items()}
            for fn in fns.values():
                fn()
            torch.cuda.synchronize()
            us = time_calls(fns, flush, 20)
            ref = outs["dispatch"].float()
            worst = max(float((outs[nm].float() - ref).norm() / ref.norm()) for nm in cands)
            best = min((v, nm) for nm, v in us.items() if nm != "dispatch")
            rows.append((m, n, k, us["dispatch"], best[0], best[1], worst, cands["dispatch"]))
            print(f"M={m:3} N={n:5} K={k:5}  dispatch {us['dispatch']:7.2f}  " +
                  "  ".join(f"{nm.split(' ', 1)[1]} {us[nm]:7.2f}" for nm in cands if nm != "dispatch") +
                  f"  best/dispatch {best[0] / us['dispatch']:.3f}  max rel diff {worst:.1e}", flush=True)
    print("\nM N K | dispatch us | best gemv us | config | ratio")
    for m, n, k, d, g, nm, _, c in rows:
        print(f"{m} {n} {k} | {d:.2f} ({c.label()}) | {g:.2f} | {nm} | {g / d:.3f}")


if __name__ == "__main__":
    main()
