"""CPU: the installed package carries its kernels, tables and trace (no C++ build at install)."""
from pathlib import Path

import pytest

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


def _pyproject():
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())


def test_metadata_uses_current_forms():
    """SPDX license string (the table form and license classifiers are deprecated by setuptools),
    Python-version classifiers from requires-python, and no cap in an extra that fits one machine."""
    project = _pyproject()["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]
    versions = {c.rsplit(" ", 1)[1] for c in project["classifiers"] if c.startswith("Programming Language :: Python :: 3.")}
    assert {"3.10", "3.11", "3.12", "3.13"} <= versions and project["requires-python"] == ">=3.10"
    torch = [r for r in project["optional-dependencies"]["test"] if r.startswith("torch")]
    assert torch == ["torch>=2.9"], torch


def test_every_shipped_kernel_folder_is_a_declared_package():
    """setuptools warns about data folders not declared as packages (kernels_cu/common, ptx)."""
    tool = _pyproject()["tool"]["setuptools"]
    root = Path(__file__).resolve().parents[1]
    folders = {p.parent for p in (root / "kernels_cu").rglob("*") if p.suffix in (".cuh", ".cu", ".py")}
    want = {"fp8gemm.kernels_cu" + "".join("." + part for part in f.relative_to(root / "kernels_cu").parts)
            for f in folders if "__pycache__" not in f.parts}
    assert want <= set(tool["packages"]), want - set(tool["packages"])
    for pkg in want:
        assert pkg in tool["package-data"], pkg
