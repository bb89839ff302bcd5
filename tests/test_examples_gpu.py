"""GPU (CPU: that they exist): every script in examples/ runs to completion and its own result check passes (each exits
non-zero on a mismatch and prints "ok" on success)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p.name for p in (REPO / "examples").glob("*.py"))


def test_examples_exist():
    assert {"jax_mlp_jit.py", "torch_linear_cuda_graph.py", "cupy_pipeline.py"} <= set(EXAMPLES)


@pytest.mark.gpu
@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_and_checks_itself(name):
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    res = subprocess.run([sys.executable, str(REPO / "examples" / name)], env=env, capture_output=True,
                         text=True, timeout=600)
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-4000:]
    assert res.stdout.startswith("ok"), log[-4000:]


def test_examples_without_a_gpu_say_what_is_missing():
    """CPU: each example exits 1 with one line naming what is missing, not a traceback."""
    from fp8gemm.hw import gpu_problem
    if gpu_problem() is None:
        pytest.skip("an SM90 GPU is here: the examples run (test_example_runs_and_checks_itself)")
    for name in EXAMPLES:
        res = subprocess.run([sys.executable, str(REPO / "examples" / name)], capture_output=True, text=True,
                             timeout=300, cwd=REPO / "examples")
        assert res.returncode == 1, (name, res.stderr[-2000:])
        assert "Traceback" not in res.stderr and f"examples/{name} needs an SM90 GPU" in res.stderr, res.stderr[-2000:]
