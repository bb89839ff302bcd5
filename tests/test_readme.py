"""CPU: the README's two commands are what .ci/run runs, and the test command stays short."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _bash_blocks(text):
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def readme_test_command():
    return next(b.strip() for b in _bash_blocks(README) if "pytest" in b)


def test_ci_runs_the_readme_test_command_plus_the_compile_sweep():
    install, _, test = readme_test_command().partition(" && ")
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert install in ci, (install, ci)
    assert f"{test} --compile-sweep" in ci, (test, ci)


def test_readme_test_command_skips_the_compile_sweep_unless_asked():
    """Without --compile-sweep the exhaustive nvcc sweep skips (with or without nvcc on PATH)."""
    res = subprocess.run([sys.executable, "-m", "pytest", "tests/test_kernels_compile.py", "-q", "-rs",
                          "-k", "compiles_without_spills", "-p", "no:cacheprovider"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert " passed" not in res.stdout and " skipped" in res.stdout, res.stdout[-2000:]
    assert "--compile-sweep" in res.stdout or "nvcc not on PATH" in res.stdout, res.stdout[-2000:]


BENCH_COMMAND = ('pip install ".[cu13,bench]" && fp8gemm-bench --csv bench/results/h200.csv '
                 '--plot bench/results/h200.png')
TEST_COMMAND = 'pip install ".[cu13,test]" && pytest tests -q -rs'


def test_readme_is_a_user_guide():
    """About 200 lines: install, the two commands, a first multiplication, the API, rules,
    numerics, one speed table; the measurement log lives in bench/NOTES.md."""
    lines = README.splitlines()
    assert len(lines) <= 230, len(lines)
    heads = [line[3:] for line in lines if line.startswith("## ")]
    for want in ("Install", "The two commands", "A first multiplication", "API by caller", "Rules", "Numerics",
                 "Speed", "Reliability", "License"):
        assert want in heads, heads
    assert [b.strip() for b in _bash_blocks(README) if "&&" in b] == [BENCH_COMMAND, TEST_COMMAND]
    assert "source hash `aa0dafea`" not in README and "session 33" not in README       # the log moved
    notes = (ROOT / "bench" / "NOTES.md").read_text()
    assert "The README's measurement log" in notes and "source hash `aa0dafea`" in notes


def _example():
    return re.search(r"## A first multiplication\n\n```python\n(.*?)```", README, re.S).group(1)


def test_readme_example_compiles_and_checks_itself():
    code = _example()
    compile(code, "README example", "exec")
    for step in ("quantize_per_token_group", "quantize_per_block", "fp8gemm.matmul", "reference.matmul", "assert"):
        assert step in code, step


@pytest.mark.gpu
def test_readme_example_runs():
    res = subprocess.run([sys.executable, "-c", _example()], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "M=256 N=4096 K=7168" in res.stdout
