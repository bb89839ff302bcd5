"""A plain install can build its kernels: NVRTC (the nvidia-cuda-nvrtc wheel the package depends
on, found by CuPy) compiles one instantiation of every kernel family for sm_90a, with no GPU and
no CUDA toolkit on PATH."""
import pytest

from fp8gemm import compiler


def _nvrtc_or_skip():
    try:
        from cupy.cuda import nvrtc
        return nvrtc.getVersion()
    except Exception as exc:          # noqa: BLE001 - the reason is the report
        pytest.skip(f"NVRTC does not load here ({exc}); install fp8gemm's dependencies (nvidia-cuda-nvrtc)")


# one instantiation per family, as the dispatcher and the MoE layer ask for them
FAMILIES = [
    ("sm90_fp8_gemm_general", (128, 4, 0, 8, "false", "true", "false")),
    ("sm90_fp8_gemm_swap_ab", (16, 6, 0, 1, "false", "false")),
    ("sm90_fp8_gemm_short_k", (128, 128, 1, 2, "true", "false")),
    ("sm90_fp8_gemm_gemv", (1, 4, 2, 0)),
    ("sm90_fp8_gemm_wg3", (128, 3, 0, 1, "false")),
    ("moe_glue", (0,)),
    ("quantize_per_token_group", (0, 4)),
]


def test_nvrtc_is_cuda_13():
    major, _ = _nvrtc_or_skip()
    assert major == 13, f"NVRTC {major}.x: fp8gemm's CuPy build is for CUDA 13"


@pytest.mark.parametrize("variant,targs", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_every_kernel_family_compiles_without_a_gpu(variant, targs):
    _nvrtc_or_skip()
    cubin = compiler.nvrtc_cubin(variant, targs)
    assert cubin[:4] == b"\x7fELF" and len(cubin) > 4096, "not a cubin"
