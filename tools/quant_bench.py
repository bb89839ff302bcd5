"""Device time of the GPU quantizers (CUPTI, L2 cold, median of 20) and their effective bandwidth:
bytes read + written per call over the time, as shipped, against a copy of the input in the same
run; then the weight quantizer's bits against the host one. Usage: python tools/quant_bench.py"""
import torch

import fp8gemm
from fp8gemm.bench.timing import L2Flush, time_calls

SHAPES = [(128, 7168), (4096, 7168), (16384, 4096)]
# Weight matrices [..., N, K]: one DeepSeek-V3 FFN matrix, and a layer's experts in one launch.
WEIGHTS = [((7168, 18432), torch.float32), ((7168, 18432), torch.bfloat16), ((64, 4096, 7168), torch.bfloat16)]


def main():
    run(L2Flush())


def run(flush):
    activations(flush)
    weights(flush)


def activations(flush):
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


def weights(flush):
    import time

    import numpy as np

    from fp8gemm import host_quant
    for shape, dt in WEIGHTS:
        w = torch.randn(*shape, device="cuda", dtype=dt) * 0.05
        fns = {"fp8gemm": lambda w=w: fp8gemm.quantize_per_block(w), "clone": w.clone}
        fns["fp8gemm"]()
        torch.cuda.synchronize()
        t = time_calls(fns, flush, 20)
        us, n, k = t["fp8gemm"], shape[-2], shape[-1]
        batch = w.numel() // (n * k)
        moved = w.numel() * (w.element_size() + 1) + batch * (-(-n // 128)) * (-(-k // 128)) * 4
        copy_bw = 2 * w.numel() * w.element_size() / t["clone"] / 1e3
        line = (f"W {'x'.join(map(str, shape)):>16} {str(dt)[6:]:8}: {us:8.2f} us  {moved / us / 1e3:7.1f} GB/s "
                f"(clone {copy_bw:6.1f} GB/s: {moved / us / 1e3 / copy_bw:.0%})")
        if batch == 1:     # the host quantizer on the same matrix: time and bits
            q, s = fp8gemm.quantize_per_block(w)
            host_in = w.float().cpu().numpy()
            host_quant.quantize_per_block(host_in[:256, :256])           # numba's first compile
            t0 = time.perf_counter()
            hq, hs = host_quant.quantize_per_block(host_in)
            host_s = time.perf_counter() - t0
            same = (np.array_equal(q.view(torch.uint8).cpu().numpy(), np.asarray(hq).view(np.uint8))
                    and np.array_equal(s.cpu().numpy(), hs))
            line += f"  host {host_s:.2f} s, bits {'equal' if same else 'DIFFER'}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
