"""A PyTorch nn.Linear replaced by an FP8 fp8gemm layer, run under a CUDA graph: the activation
quantizer and the GEMM are both captured, then the graph replays with new inputs copied into the
static buffer. Checks every replay against fp8gemm's float64 reference and against the original
bf16 layer (FP8 quantization error only).

    python examples/torch_linear_cuda_graph.py      # prints "ok", exits 1 on a mismatch
"""
import sys

import torch

import fp8gemm
from fp8gemm.hw import require_gpu


class FP8Linear(torch.nn.Module):
    """y = x W^T + b with W stored as FP8 E4M3 + 128x128 block scales, x quantized per 1x128."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        w, ws = fp8gemm.quantize_per_block(linear.weight.detach().float().cpu().numpy())
        dev = linear.weight.device
        self.register_buffer("w", torch.from_numpy(w.view("uint8")).to(dev).view(torch.float8_e4m3fn))
        self.register_buffer("w_scale", torch.from_numpy(ws).to(dev))
        self.bias = linear.bias

    def forward(self, x):
        a, a_scale = fp8gemm.quantize_per_token_group(x)
        y = fp8gemm.matmul(a, self.w, a_scale, self.w_scale, out_dtype=x.dtype)
        return y + self.bias if self.bias is not None else y


def main():
    require_gpu("examples/torch_linear_cuda_graph.py", "torch")  # says what is missing, without a traceback
    torch.manual_seed(0)
    lin = torch.nn.Linear(4096, 2048, device="cuda", dtype=torch.bfloat16)
    fp8 = FP8Linear(lin)
    static_x = torch.randn(32, 4096, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):           # warm-up (compiles, plans) off the capture
        fp8(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = fp8(static_x)
    worst_ref = worst_bf16 = 0.0
    for step in range(5):
        static_x.copy_(torch.randn(32, 4096, device="cuda", dtype=torch.bfloat16))
        graph.replay()
        torch.cuda.synchronize()
        a, sa = fp8gemm.quantize_per_token_group(static_x)
        ref = torch.from_numpy(fp8gemm.reference.matmul(
            a.view(torch.uint8).cpu().numpy(), fp8.w.view(torch.uint8).cpu().numpy(),
            sa.cpu().numpy(), fp8.w_scale.cpu().numpy())).cuda() + lin.bias.double()
        y = static_y.double()
        worst_ref = max(worst_ref, float((y - ref).norm() / ref.norm()))
        dense = lin(static_x).double()
        worst_bf16 = max(worst_bf16, float((y - dense).norm() / dense.norm()))
    ok = worst_ref <= 4e-3 and worst_bf16 <= 8e-2
    print(f"{'ok' if ok else 'MISMATCH'}: CUDA-graph replays x5, relative error vs float64 reference "
          f"{worst_ref:.2e} (bound 4e-3), vs the bf16 nn.Linear {worst_bf16:.2e} (FP8 quantization)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
