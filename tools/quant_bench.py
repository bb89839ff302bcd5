"""Device time of the GPU quantizer (CUPTI, L2 cold, median of 20) and its effective bandwidth:
bytes read + written per call over the time, as shipped. Usage: python tools/quant_bench.py"""
import torch

import fp8gemm
from fp8gemm.bench.timing import L2Flush, time_calls

SHAPES = [(128, 7168), (4096, 7168), (16384, 4096)]


def main():
    run(L2Flush())


def run(flush):
    for m, k in SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        fns = {"fp8gemm": lambda x=x: fp8gemm.quantize_per_token_group(x), "clone": x.clone}
        fns["fp8gemm"]()
        torch.cuda.synchronize()
        t = time_calls(fns, flush, 20)
        us = t["fp8gemm"]
        moved = m * k * 2 + m * k + m * (-(-k // 128)) * 4
        copy_bw = 2 * m * k * 2 / t["clone"] / 1e3      # x.clone(): read + write of x, same run
        print(f"M={m:6} K={k:5} bf16: {us:8.2f} us  {moved / us / 1e3:7.1f} GB/s "
              f"(x.clone {copy_bw:6.1f} GB/s: {moved / us / 1e3 / copy_bw:.0%})", flush=True)


if __name__ == "__main__":
    main()
