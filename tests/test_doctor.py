"""``python -m fp8gemm`` (fp8gemm/doctor.py) reports without a GPU and names what is missing."""
import subprocess
import sys
from pathlib import Path

import pytest

from fp8gemm import doctor


def test_gather_reports_every_item():
    items, problems = doctor.gather()
    keys = [k for k, _ in items]
    for want in ("fp8gemm", "python", "kernels built for", "dispatch table", "numba", "torch", "jax"):
        assert want in keys, keys
    assert all(isinstance(p, str) and p for p in problems)


def test_module_entry_point_prints_and_sets_the_status(tmp_path):
    # the installed package, from outside the checkout (tests/test_checkout.py runs it from the root)
    res = subprocess.run([sys.executable, "-m", "fp8gemm"], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert res.returncode in (0, 1), res.stderr[-2000:]
    assert "dispatch table" in res.stdout
    items, problems = doctor.gather()
    if problems:
        assert res.returncode == 1 and "Missing for fp8gemm to run its kernels here:" in res.stdout
        assert all(p.split(":")[0] in res.stdout for p in problems)
    else:
        assert res.returncode == 0 and "Everything fp8gemm needs is here." in res.stdout


def test_install_advice_names_what_pip_finds():
    """The advice names the extras' packages (pip finds them on any index; "fp8gemm[cu13]" only
    where fp8gemm is published), and they are what pyproject's extras install."""
    from fp8gemm import hw
    assert "fp8gemm[" not in hw.CUPY_MISSING
    for major in (13, 12):
        assert hw.install_command(major) in hw.CUPY_MISSING
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    assert {13: tuple(extras["cu13"]), 12: tuple(extras["cu12"])} == hw.CUDA_EXTRAS


def test_doctor_advice_is_a_command_pip_accepts():
    source = Path(doctor.__file__).read_text()
    assert "fp8gemm[" not in source
