"""fp8gemm: W8A8 block-FP8 GEMM kernels for NVIDIA Hopper (SM90), callable from CuPy, PyTorch and JAX.

    C = fp8gemm.matmul(a, b, a_scale, b_scale, out_dtype="bfloat16")

computes ``(a * a_scale) @ (b * b_scale).T`` with FP32 accumulation, where ``a`` [M, K] is FP8 E4M3
with one fp32 scale per token per 128 K values and ``b`` [N, K] is FP8 E4M3 with one fp32 scale per
128x128 block. Kernels are CUDA C++ compiled at first use by NVRTC (through CuPy) and cached.
"""
from pathlib import Path as _Path

# Installed, kernels_cu/ dispatch/ bench/ ship inside this package (pyproject's package-dir). Run
# from a source checkout, they sit beside it: let fp8gemm.<name> find them there too.
_here = _Path(__file__).resolve().parent
if not (_here / "dispatch").is_dir() and (_here.parent / "dispatch" / "selector.py").is_file():
    __path__.append(str(_here.parent))

from . import reference  # noqa: E402
from .api import matmul  # noqa: E402
from .dispatch import explain  # noqa: E402
from .grouped import grouped_matmul_contiguous, grouped_matmul_masked  # noqa: E402
from .moe_layer import moe  # noqa: E402
from .quantize import quantize_per_token_group  # noqa: E402
from .reference import quantize_per_block  # noqa: E402

__version__ = "0.1.0"

__all__ = ["matmul", "grouped_matmul_contiguous", "grouped_matmul_masked", "moe", "explain", "quantize_per_token_group", "quantize_per_block", "reference",
           "__version__"]
