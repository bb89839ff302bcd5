"""Device time of the GPU quantizer (CUPTI, L2 cold, median of 20) and its effective bandwidth:
bytes read + written per call over the time. Usage: PYTHONPATH=. python tools/quant_bench.py"""
import torch

import fp8gemm
from fp8gemm.bench.timing import L2Flush, time_calls

SHAPES = [(128, 7168), (4096, 7168), (16384, 4096)]


def main():
    flush = L2Flush()
    for m, k in SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        fns = {"fp8gemm": lambda x=x: fp8gemm.quantize_per_token_group(x)}
        fns["fp8gemm"]()
        torch.cuda.synchronize()
        us = time_calls(fns, flush, 20)["fp8gemm"]
        moved = m * k * 2 + m * k + m * (-(-k // 128)) * 4
        print(f"M={m:6} K={k:5} bf16: {us:8.2f} us  {moved / us / 1e3:7.1f} GB/s", flush=True)


if __name__ == "__main__":
    main()
