"""fp8gemm.precompile: compile ahead of the first requests what the dispatcher will pick.

A server's first calls otherwise compile each new kernel with NVRTC on the spot (about a second
each, one after another: ~28 instantiations over the DeepSeek trace). ``precompile`` asks the
dispatcher (this GPU's table, its SM count) which kernel each shape gets, keeps one job per
distinct instantiation, and runs them in worker processes (fp8gemm/workers.py) that call fp8gemm.matmul
once on zero operands: each compiles into CuPy's disk cache, where this process and later ones
load it in milliseconds. A worker that crashes or raises is reported, never fatal here.
"""
from __future__ import annotations

import json
import sys
import time


def shapes_of(shapes=None, nk=None, m=None) -> list:
    """(M, N, K) triples: ``shapes``, or every (N, K) of ``nk`` at every M of ``m`` (an int, an
    iterable or a range), or with neither the built-in DeepSeek trace."""
    if shapes is not None:
        return [tuple(int(v) for v in s) for s in shapes]
    if nk is not None:
        ms = [m] if isinstance(m, int) else list(m if m is not None else (1, 16, 64, 128, 256, 512, 1024, 4096))
        return [(int(mm), int(n), int(k)) for n, k in nk for mm in ms]
    from .shapes import read_shapes, trace_path
    return read_shapes(trace_path())


def plan_jobs(shapes, out_dtype: str, gpu: str, num_sms: int) -> list:
    """One warm-up job per distinct (kernel descriptor, N, K): the instantiation a descriptor asks
    for depends on the output type and, through its store path and K rules, on N and K."""
    from .dispatch import select
    seen, jobs = set(), []
    for m, n, k in shapes:
        c = select(m, n, k, out_dtype, gpu=gpu, num_sms=num_sms)
        if (c.key(), n, k) not in seen:
            seen.add((c.key(), n, k))
            jobs.append({"kind": "fp8gemm_dispatch", "m": m, "n": n, "k": k, "out_dtype": out_dtype,
                         "kernel": c.label()})
    jobs.sort(key=lambda j: j["kernel"])
    return jobs


def compile_job(job) -> None:
    """A worker's job: one dispatched call of the shape on zero operands (CuPy)."""
    import cupy

    from .api import matmul

    m, n, k = job["m"], job["n"], job["k"]
    kb, nb = -(-k // 128), -(-n // 128)
    matmul(cupy.zeros((m, k), cupy.uint8), cupy.zeros((n, k), cupy.uint8), cupy.ones((m, kb), cupy.float32),
                   cupy.ones((nb, kb), cupy.float32), out_dtype=job["out_dtype"])
    cupy.cuda.Device().synchronize()


# kind -> builder for precompile's worker processes (fp8gemm/workers.py)
BUILDERS = {"fp8gemm_dispatch": compile_job}


def _bar(done: int, total: int) -> None:
    width = 30
    fill = width * done // max(total, 1)
    sys.stderr.write(f"\rfp8gemm.precompile [{'#' * fill}{'.' * (width - fill)}] {done}/{total} kernels")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def precompile(shapes=None, *, nk=None, m=None, out_dtype: str = "bfloat16", workers: int | None = None,
               progress: bool = True) -> dict:
    """Compile the kernels fp8gemm.matmul will pick for ``shapes`` [(M, N, K), ...] (or the (N, K)
    pairs ``nk`` of a model at the token counts ``m``; default: the built-in trace) on the
    current GPU, in ``workers`` processes, with a progress bar on stderr. Returns {"shapes",
    "kernels", "seconds", "workers", "failed": {kernel at M x N x K: why}}. RuntimeError where no
    SM90 GPU answers (it compiles for the GPU it runs on)."""
    from .hw import gpu_problem
    problem = gpu_problem()
    if problem:
        raise RuntimeError(f"fp8gemm.precompile compiles the kernels for this machine's SM90 GPU: {problem}. Run it "
                           f"where the kernels will run (python -m fp8gemm lists what is missing)")
    import cupy

    from .launcher import gpu_key, sm_count
    from .workers import default_workers, warm

    dev = cupy.cuda.Device().id
    todo = shapes_of(shapes, nk, m)
    jobs = plan_jobs(todo, out_dtype, gpu_key(dev), sm_count(dev))
    t0 = time.time()
    report = warm(jobs, workers=workers or default_workers(), worker_args=("fp8gemm.compile_ahead:BUILDERS",),
                  on_progress=_bar if progress else None)
    failed = {}
    for key, why in list(report["crashed"].items()) + list(report["raised"].items()):
        j = json.loads(key)
        failed[f"{j['kernel']} at {j['m']} x {j['n']} x {j['k']}"] = why
    return {"shapes": len(todo), "kernels": len(jobs), "seconds": round(time.time() - t0, 1),
            "workers": report["workers"], "failed": failed}

