"""A plain install can build its kernels: NVRTC (the NVRTC wheel of the install's cu13 or cu12
extra, found by CuPy) compiles one instantiation of every kernel family for sm_90a, with no GPU
and no CUDA toolkit on PATH."""
import pytest

from fp8gemm import compiler


def _nvrtc_or_skip():
    try:
        from cupy.cuda import nvrtc
        return nvrtc.getVersion()
    except Exception as exc:          # noqa: BLE001 - the reason is the report
        pytest.skip(f"NVRTC does not load here ({exc}); install fp8gemm with its cu13 or cu12 extra")


# one instantiation per family, as the dispatcher and the MoE layer ask for them
FAMILIES = [
    ("sm90_fp8_gemm_general", (128, 4, 0, 8, "false", "true", "false")),
    ("sm90_fp8_gemm_swap_ab", (16, 6, 0, 1, "false", "false")),
    ("sm90_fp8_gemm_short_k", (128, 128, 1, 2, "true", "false")),
    ("sm90_fp8_gemm_gemv", (1, 4, 2, 0)),
    ("sm90_fp8_gemm_wg3", (128, 3, 0, 1, "false")),
    ("moe_glue", (0,)),
    ("quantize_per_token_group", (0, 4)),
    ("quantize_per_block", (0, "true")),
]


def _cupy_cuda_major():
    """The CUDA major version of the installed CuPy wheel (cupy-cuda13x / cupy-cuda12x)."""
    from importlib import metadata
    for major in (13, 12):
        try:
            metadata.version(f"cupy-cuda{major}x")
            return major
        except metadata.PackageNotFoundError:
            pass
    pytest.skip("no cupy-cuda13x or cupy-cuda12x wheel installed (a CuPy built otherwise)")


def test_nvrtc_matches_cupys_cuda():
    major, minor = _nvrtc_or_skip()
    want = _cupy_cuda_major()
    assert major == want, f"NVRTC {major}.{minor} with CuPy for CUDA {want}: install the cu{want} extra"
    assert (major, minor) >= (12, 4), f"NVRTC {major}.{minor}: the kernels need CUDA 12.4 or newer"


@pytest.mark.parametrize("variant,targs", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_every_kernel_family_compiles_without_a_gpu(variant, targs):
    _nvrtc_or_skip()
    cubin = compiler.nvrtc_cubin(variant, targs)
    assert cubin[:4] == b"\x7fELF" and len(cubin) > 4096, "not a cubin"
