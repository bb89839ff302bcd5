"""Which kernel cuBLASLt runs for block-scaled FP8 (torch scaled_mm, 1x128 x 128x128 scales):
its name, grid, block, registers and shared memory, from a kineto trace. Reads nothing of ours.

    python3 lab/cublaslt_kernels.py [--shapes M,N,K ...] [--trace DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

DEFAULT = ["256,8192,4096", "512,8192,4096", "1024,4096,4096", "4096,4096,4096", "4096,512,4096",
           "1024,1536,4096", "8192,8192,4096", "2048,7168,2048"]


def main() -> None:
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", nargs="*", default=DEFAULT)
    ap.add_argument("--trace", default=None, help="folder for the kineto json files")
    args = ap.parse_args()
    out_dir = args.trace or tempfile.mkdtemp()
    os.makedirs(out_dir, exist_ok=True)
    rec = F.ScalingType
    for s in args.shapes:
        m, n, k = (int(v) for v in s.split(","))
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
        kb, nb = -(-k // 128), -(-n // 128)
        sa = torch.rand(m, kb, device="cuda").t().contiguous().t()
        sb = torch.rand(nb, kb, device="cuda").t()

        def call():
            return F.scaled_mm(a, b.t(), scale_a=sa, scale_recipe_a=rec.BlockWise1x128, scale_b=sb,
                               scale_recipe_b=rec.BlockWise128x128, output_dtype=torch.bfloat16)
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                call()
            torch.cuda.synchronize()
        path = os.path.join(out_dir, f"cublaslt_{m}x{n}x{k}.json")
        prof.export_chrome_trace(path)
        events = json.load(open(path))["traceEvents"]
        kern = [e for e in events if e.get("cat") == "kernel"]
        seen = {}
        for e in kern:
            a_ = e.get("args", {})
            key = e["name"]
            seen.setdefault(key, []).append((e["dur"], a_.get("grid"), a_.get("block"),
                                             a_.get("registers per thread"), a_.get("shared memory")))
        for name, v in seen.items():
            durs = sorted(x[0] for x in v)
            _, grid, block, regs, smem = v[0]
            print(f"{m}x{n}x{k}: {durs[len(durs) // 2]:.2f} us  grid={grid} block={block} regs={regs} "
                  f"smem={smem}  {name[:160]}")


if __name__ == "__main__":
    main()
