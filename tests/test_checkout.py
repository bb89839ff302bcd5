"""CPU: the README's commands work from the repository root, whatever the install.

From the root, Python imports the checkout's fp8gemm/ before the installed package (the current
directory is first on sys.path); that folder lacks dispatch/, kernels_cu/ and bench/, which
pyproject's package-dir installs inside the package. fp8gemm/_checkout.py maps them.
"""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Drops the editable install's own finder, so that only what the checkout does is tested (a plain
# install has none), then imports the checkout's package as Python does from the root.
_PLAIN = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in type(f).__module__]; "
          "sys.path.insert(0, {root!r}); ")


def _run(args, code=None, timeout=300):
    cmd = [sys.executable] + (["-c", _PLAIN.format(root=str(ROOT)) + code] if code else args)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


def test_checkout_package_has_its_subpackages_without_an_editable_install():
    res = _run(None, "import fp8gemm, fp8gemm.dispatch, fp8gemm.bench.provenance, fp8gemm.kernels_cu; "
                     "from fp8gemm import compiler; "
                     "print(fp8gemm.__file__); print(fp8gemm.dispatch.__file__); print(compiler.kernel_dir())")
    assert res.returncode == 0, res.stderr[-2000:]
    pkg, disp, kdir = res.stdout.split()
    assert Path(pkg).parent == ROOT / "fp8gemm"
    assert Path(disp).parent == ROOT / "dispatch" and Path(kdir) == ROOT / "kernels_cu"


def test_readme_commands_run_from_the_root():
    """python -m fp8gemm and the README's provenance command, from the repository root."""
    res = _run(["-m", "fp8gemm"])
    assert res.returncode in (0, 1) and "dispatch table" in res.stdout, res.stderr[-2000:]
    res = _run(["-m", "fp8gemm.bench.provenance", "."])
    assert res.returncode == 0 and "source_hash" in res.stdout, res.stderr[-2000:]
    res = _run(["-c", "import fp8gemm; print(fp8gemm.explain(16, 4096, 4096))"])
    assert res.returncode == 0 and "4096" in res.stdout, res.stderr[-2000:]


def test_installed_layout_maps_nothing(tmp_path):
    """A package folder that holds its subpackages (the installed layout) is left alone."""
    from fp8gemm import _checkout
    for sub in _checkout.SUBPACKAGES:
        (tmp_path / "pkg" / sub).mkdir(parents=True)
    before = list(sys.meta_path)
    assert not _checkout.map_subpackages("pkg", [str(tmp_path / "pkg")])
    assert sys.meta_path == before
