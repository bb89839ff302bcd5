"""Shared fixtures: GPU detection (GPU tests skip with a visible reason where none exists)."""
import os

import pytest

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")   # JAX beside CuPy and torch
# The tests read the shipped dispatch table, never a user's (selector.table_path)
os.environ.pop("FP8GEMM_TABLE", None)
os.environ["FP8GEMM_TABLE_DIR"] = os.path.join(os.path.dirname(__file__), "no-user-tables")

try:
    import fp8gemm.dispatch  # noqa: F401
except ModuleNotFoundError as exc:    # the checkout's fp8gemm/ imported without its subpackages
    raise pytest.UsageError(f"fp8gemm is importable but not its subpackages ({exc}): run the tests on an "
                            f"installed package (pip install \".[test]\" && pytest tests) or, from a "
                            f"checkout with python -m pytest, an editable install (pip install -e \".[test]\")")


def _gpu_reason():
    try:
        import cupy
    except Exception as exc:  # pragma: no cover - cupy is a dependency
        return f"cupy not importable: {exc}"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"no CUDA GPU on this machine ({type(exc).__name__}: {exc})"
    if n == 0:
        return "no CUDA GPU on this machine"
    major = cupy.cuda.Device(0).compute_capability
    if major != "90":
        return f"GPU 0 has compute capability {major}; fp8gemm kernels need SM90 (H100/H200)"
    return None


GPU_SKIP_REASON = _gpu_reason()


def pytest_addoption(parser):
    parser.addoption("--compile-sweep", action="store_true",
                     help="also run the compile_sweep tests: every kernel instantiation compiled with nvcc "
                          "(tests/test_kernels_compile.py, ~10 minutes on two cores; .ci/run passes it)")


COMPILE_SWEEP_SKIP = ("compile sweep skipped: every kernel instantiation under nvcc runs with "
                      "pytest --compile-sweep (as .ci/run does)")


def pytest_collection_modifyitems(config, items):
    sweep = None if config.getoption("--compile-sweep") else pytest.mark.skip(reason=COMPILE_SWEEP_SKIP)
    gpu = None if GPU_SKIP_REASON is None else pytest.mark.skip(reason=f"GPU test skipped: {GPU_SKIP_REASON}")
    for item in items:
        if gpu is not None and "gpu" in item.keywords:
            item.add_marker(gpu)
        if sweep is not None and "compile_sweep" in item.keywords:
            item.add_marker(sweep)


def pytest_report_header(config):
    return f"fp8gemm GPU tests: {'enabled' if GPU_SKIP_REASON is None else 'SKIPPED - ' + GPU_SKIP_REASON}"


def pytest_terminal_summary(terminalreporter):
    """Name the code that was tested in the log's last lines (bench/provenance.py), so that a
    committed suite log can be matched with the benchmark results of the same tree."""
    try:
        from fp8gemm.bench.provenance import installed_hashes

        h = installed_hashes()
        terminalreporter.write_line(f"fp8gemm source_hash {h['source_hash']} host_code_hash {h['host_code_hash']}")
    except Exception as exc:  # never fail a test run over its provenance line
        terminalreporter.write_line(f"fp8gemm source_hash unavailable ({type(exc).__name__}: {exc})")
