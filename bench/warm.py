"""Warm a just-in-time peer's kernel cache in parallel before timing, and find the calls that crash.

DeepGEMM compiles one kernel per new configuration with nvcc on its first call (5-10 s each; the
whole GEMM trace about 400 s in one process). Before the timed run, ``warm`` runs every job once in
several worker processes (fp8gemm/workers.py; DeepGEMM writes each kernel into its disk cache,
``DG_JIT_CACHE_DIR``, by an atomic rename, so workers share it safely) on zero-filled inputs; the
timed run then loads them from disk. A worker that dies inside a job (a segfault, an abort) cannot
take the bench with it: the parent records that job as crashed, starts a new worker for the rest of
the slice, and the bench does not time that peer on that job.

A job's ``kind`` names a builder in the workers' builders ("module:name": the peers',
``peers.WARM_BUILDERS``, or the tuner's, ``tune.WARM_BUILDERS``); its key (``job_key``) is how the
bench looks up the outcome.
"""
from __future__ import annotations

from fp8gemm import workers as _workers
from fp8gemm.workers import default_workers, job_key, worker  # noqa: F401 - the bench's names for them

PEER_BUILDERS = "fp8gemm.bench.peers:WARM_BUILDERS"


def warm(jobs, workers: int | None = None, python: str | None = None,
         timeout_s: float = _workers.WORKER_TIMEOUT_S, worker_module: str | None = None, on_progress=None,
         builders: str = PEER_BUILDERS) -> dict:
    """fp8gemm.workers.warm, its workers running ``builders``; ``worker_module`` replaces the worker
    process (a module whose main calls ``worker`` with its own builders)."""
    if worker_module is None:
        return _workers.warm(jobs, workers=workers, python=python, timeout_s=timeout_s,
                             on_progress=on_progress, worker_args=(builders,))
    return _workers.warm(jobs, worker_module, workers=workers, python=python, timeout_s=timeout_s,
                         on_progress=on_progress)
