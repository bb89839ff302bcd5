"""fp8gemm.precompile (fp8gemm/compile_ahead.py): which jobs it plans (CPU), the progress callback of
fp8gemm/workers.py, and the worker builder it names; the GPU run is tests/test_precompile_gpu.py."""
import pytest

import fp8gemm
from fp8gemm import compile_ahead as pc
from fp8gemm import workers
from fp8gemm.bench import warm


def test_shapes_from_pairs_and_token_counts():
    assert pc.shapes_of([(1, 2, 3)]) == [(1, 2, 3)]
    assert pc.shapes_of(nk=[(4096, 7168)], m=[1, 64]) == [(1, 4096, 7168), (64, 4096, 7168)]
    assert pc.shapes_of(nk=[(4096, 7168)], m=8) == [(8, 4096, 7168)]
    assert len(pc.shapes_of()) == 264                       # the built-in trace


def test_one_job_per_distinct_kernel():
    shapes = pc.shapes_of()
    jobs = pc.plan_jobs(shapes, "bfloat16", "h200", 132)
    keys = {(j["kernel"], j["n"], j["k"]) for j in jobs}
    assert len(keys) == len(jobs) and 0 < len(jobs) <= len(shapes)
    assert all(j["kind"] == "fp8gemm_dispatch" and j["kind"] in pc.BUILDERS for j in jobs)
    assert [j["kernel"] for j in jobs] == sorted(j["kernel"] for j in jobs)    # shared kernels together
    assert fp8gemm.precompile is pc.precompile


def test_warm_reports_progress(tmp_path):
    """fp8gemm/workers.py's on_progress (through bench/warm.py), with a worker that runs trivial jobs."""
    seen = []
    jobs = [{"kind": "noop", "i": i} for i in range(5)]
    module = tmp_path / "noop_worker.py"
    module.write_text("import sys\nfrom fp8gemm.bench.warm import worker\n"
                      "sys.exit(worker(sys.argv[1], sys.argv[2], {'noop': lambda job: None}))\n")
    import os
    import sys
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = str(tmp_path) + (os.pathsep + env_path if env_path else "")
    try:
        report = warm.warm(jobs, 2, worker_module="noop_worker", on_progress=lambda d, t: seen.append((d, t)))
    finally:
        os.environ["PYTHONPATH"] = env_path
    assert report["crashed"] == {} and report["raised"] == {}
    assert seen[-1] == (5, 5) and all(t == 5 and 0 <= d <= 5 for d, t in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_library_worker_runs_named_builders(tmp_path, monkeypatch):
    """precompile's workers are ``python -m fp8gemm.workers jobs status module:builders`` (no
    benchmark module involved)."""
    (tmp_path / "record_builders.py").write_text(
        "import pathlib\nOUT = pathlib.Path(__file__).with_name('seen.txt')\n"
        "BUILDERS = {'rec': lambda job: OUT.open('a').write(str(job['i']) + '\\n')}\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    report = workers.warm([{"kind": "rec", "i": i} for i in range(3)], workers=1,
                          worker_args=("record_builders:BUILDERS",))
    assert report["crashed"] == {} and report["raised"] == {}
    assert (tmp_path / "seen.txt").read_text().split() == ["0", "1", "2"]


def test_without_a_gpu_precompile_says_what_is_missing():
    from fp8gemm.hw import gpu_problem
    problem = gpu_problem()
    if problem is None:
        pytest.skip("an SM90 GPU is here: precompile runs (tests/test_precompile_gpu.py)")
    with pytest.raises(RuntimeError, match="fp8gemm.precompile compiles the kernels for this machine's SM90 GPU"):
        fp8gemm.precompile(nk=[(4096, 4096)], m=[1], progress=False)


def test_workers_get_the_cache_this_process_reads(tmp_path, monkeypatch):
    """CuPy 14 fixes its kernel cache directory at import: a CUPY_CACHE_DIR set afterwards moves the
    workers' cache but not this process's, so precompile's kernels would compile where this
    process never looks (session 51). The workers get compiler.kernel_cache_dir, this process's."""
    import cupy.cuda.compiler as cc
    from fp8gemm import compiler
    ours = tmp_path / "ours"
    if hasattr(cc, "_kernel_cache_backend"):
        monkeypatch.setattr(cc, "_kernel_cache_backend", type(cc._kernel_cache_backend)(str(ours)))
        monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "set_after_import"))
    else:                                                           # CuPy reads the variable each time
        monkeypatch.setenv("CUPY_CACHE_DIR", str(ours))
    assert compiler.kernel_cache_dir() == str(ours)
    (tmp_path / "env_builders.py").write_text(
        "import os, pathlib\nOUT = pathlib.Path(__file__).with_name('cache_dir.txt')\n"
        "BUILDERS = {'env': lambda job: OUT.write_text(os.environ['CUPY_CACHE_DIR'])}\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    report = workers.warm([{"kind": "env"}], workers=1, worker_args=("env_builders:BUILDERS",))
    assert report["crashed"] == {} and report["raised"] == {}
    assert (tmp_path / "cache_dir.txt").read_text() == str(ours)
