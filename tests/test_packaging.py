"""CPU: the installed package carries its kernels, tables and trace (no C++ build at install)."""
from pathlib import Path

import fp8gemm
from fp8gemm import compiler


def test_kernel_sources_and_tables_ship():
    kdir = compiler.kernel_dir()
    assert (kdir / "sm90_fp8_gemm_general.cu").is_file()
    for header in ("common/types.cuh", "common/pipeline.cuh", "ptx/wgmma.cuh", "ptx/wgmma_fp8.cuh",
                   "ptx/tma.cuh", "ptx/mbarrier.cuh", "ptx/sync.cuh"):
        assert (kdir / header).is_file(), header
    from fp8gemm import dispatch
    assert (Path(dispatch.__file__).parent / "h200.json").is_file()
    from fp8gemm import shapes
    assert len(shapes.read_shapes(shapes.trace_path())) == 264


def test_public_api():
    for name in ("matmul", "explain", "quantize_per_token_group", "quantize_per_block", "reference"):
        assert hasattr(fp8gemm, name)
    assert fp8gemm.__version__


def test_license_ships_with_the_checkout():
    """The Apache-2.0 text the package metadata names is in the repository root."""
    root = Path(__file__).resolve().parents[1]
    text = (root / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0" in text and "END OF TERMS AND CONDITIONS" in text
