"""fp8gemm: W8A8 block-FP8 GEMM kernels for NVIDIA Hopper (SM90), callable from CuPy, PyTorch and JAX.

    C = fp8gemm.matmul(a, b, a_scale, b_scale, out_dtype="bfloat16")

computes ``(a * a_scale) @ (b * b_scale).T`` with FP32 accumulation, where ``a`` [M, K] is FP8 E4M3
with one fp32 scale per token per 128 K values and ``b`` [N, K] is FP8 E4M3 with one fp32 scale per
128x128 block. Kernels are CUDA C++ compiled at first use by NVRTC (through CuPy) and cached.
"""
# kernels_cu/, dispatch/ and bench/ are the subpackages fp8gemm.kernels_cu, .dispatch and .bench
# (pyproject's package-dir): installed, they ship inside this package. In a checkout they are the
# top-level folders beside this one, and this folder is what Python imports from the repository
# root (the current directory comes first on sys.path), installed package or not: _checkout maps
# the three names onto those folders, as an editable install does, so that every command works there.
from . import _checkout

_checkout.map_subpackages(__name__, __path__)
from . import reference
from .api import matmul
from .dispatch.invariant import batch_invariant, explain, set_batch_invariant
from .dispatch.grouped import explain_moe
from .grouped import grouped_matmul_contiguous, grouped_matmul_masked
from .moe_layer import moe
from .moe_ep import moe_ep
from .quantize import quantize_per_block, quantize_per_token_group
from .compile_ahead import precompile

__version__ = "0.1.0"

__all__ = ["matmul", "grouped_matmul_contiguous", "grouped_matmul_masked", "moe", "moe_ep", "explain", "explain_moe", "set_batch_invariant", "batch_invariant", "quantize_per_token_group", "quantize_per_block", "precompile", "reference",
           "__version__"]
