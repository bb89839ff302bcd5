"""``python -m fp8gemm`` (fp8gemm/doctor.py) reports without a GPU and names what is missing."""
import subprocess
import sys

from fp8gemm import doctor


def test_gather_reports_every_item():
    items, problems = doctor.gather()
    keys = [k for k, _ in items]
    for want in ("fp8gemm", "python", "kernels built for", "dispatch table", "numba", "torch", "jax"):
        assert want in keys, keys
    assert all(isinstance(p, str) and p for p in problems)


def test_module_entry_point_prints_and_sets_the_status(tmp_path):
    # from outside the checkout, whose fp8gemm/ folder would shadow the installed package
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
