"""CPU: the README's two commands are what .ci/run runs, and the test command stays short."""
import re
import subprocess
import sys
from pathlib import Path

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
