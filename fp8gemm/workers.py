"""Run jobs in worker processes, so that a job that crashes its process cannot take the caller with it.

fp8gemm.precompile compiles the dispatcher's kernels this way (each worker's call compiles into
the disk cache, where every later process finds it), and the benchmark warms its just-in-time
peers' caches (bench/warm.py). ``warm`` splits the jobs over the workers; a worker that dies inside
a job (a segfault, an abort) or hangs is recorded against that job, and a new worker takes the
rest of its slice.

A job is a JSON-able dict with a ``kind`` naming a builder (``worker``'s ``builders``); its key
(``job_key``) is how the caller looks up the outcome.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER_TIMEOUT_S = 900        # one worker's whole slice
MAX_RESTARTS = 8              # new workers after crashes, per warm() call


def job_key(job: dict) -> str:
    return json.dumps(job, sort_keys=True)


def default_workers() -> int:
    return max(1, min(12, (os.cpu_count() or 2) - 2))


def _slices(jobs, workers: int):
    """Contiguous runs of the jobs in their given order (callers sort jobs so that those sharing a
    kernel sit together and compile once), one per worker."""
    per = -(-len(jobs) // workers) if jobs else 0
    return [jobs[i:i + per] for i in range(0, len(jobs), per)] if per else []


def _read_status(path: Path):
    """(indices started, indices done, {index: message} of those that raised) from a worker's
    status file."""
    started, done, errors = [], set(), {}
    try:
        for line in path.read_text().splitlines():
            what, _, rest = line.partition(" ")
            idx, _, msg = rest.partition(" ")
            if what == "start":
                started.append(int(idx))
            elif what == "done":
                done.add(int(idx))
            elif what == "error":
                errors[int(idx)] = msg
    except (OSError, ValueError):
        pass
    return started, done, errors


def warm(jobs, worker_module: str = "fp8gemm.workers", workers: int | None = None, python: str | None = None,
         timeout_s: float = WORKER_TIMEOUT_S, on_progress=None, worker_args=()) -> dict:
    """Run each job once in ``workers`` processes of ``python -m worker_module jobs_file
    status_file *worker_args`` (a module whose main is ``worker``; this one's takes the builders'
    "module:name" as its one argument); ``on_progress(finished, total)`` every
    0.2 s while they run). Returns {"jobs", "workers", "seconds",
    "crashed": {job_key: reason}, "raised": {job_key: message}}: ``crashed`` holds the jobs whose
    worker died or hung inside them (and those left unwarmed when workers kept dying), which the
    bench must not run in its own process; ``raised`` the jobs that raised a Python exception,
    which the bench's own call will meet and report again."""
    workers = workers or default_workers()
    t0 = time.time()
    failed: dict[str, str] = {}
    raised: dict[str, str] = {}
    pending = _slices(list(jobs), workers)
    restarts = 0
    from .compiler import kernel_cache_dir
    worker_env = dict(os.environ, CUPY_CACHE_DIR=kernel_cache_dir())
    with tempfile.TemporaryDirectory(prefix="fp8gemm-warm-") as tmp:
        running = []
        serial = 0

        def launch(chunk):
            nonlocal serial
            serial += 1
            jf, sf = Path(tmp) / f"jobs{serial}.json", Path(tmp) / f"status{serial}.txt"
            jf.write_text(json.dumps(chunk))
            sf.write_text("")
            log = open(Path(tmp) / f"log{serial}.txt", "w")
            # cwd: the job folder, so that `-m` never imports a checkout's uninstalled fp8gemm/;
            # CUPY_CACHE_DIR: the cache this process reads (compiler.kernel_cache_dir says why)
            proc = subprocess.Popen([python or sys.executable, "-m", worker_module, str(jf), str(sf), *worker_args],
                                    stdout=log, stderr=subprocess.STDOUT, cwd=jf.parent, env=worker_env)
            running.append((proc, chunk, sf, log, time.time()))

        def log_tail(log):
            try:
                lines = Path(log.name).read_text(errors="replace").strip().splitlines()
            except OSError:
                return ""
            return f": {lines[-1][:120]}" if lines else ""

        for chunk in pending:
            launch(chunk)
        finished_before = 0           # jobs of the workers already gone
        while running:
            time.sleep(0.2)
            if on_progress is not None:
                on_progress(finished_before + sum(len(_read_status(item[2])[0]) for item in running), len(jobs))
            for item in list(running):
                proc, chunk, sf, log, started_at = item
                rc = proc.poll()
                if rc is None and time.time() - started_at < timeout_s:
                    continue
                if rc is None:
                    proc.kill()
                    proc.wait()
                    rc = "timeout"
                log.close()
                running.remove(item)
                started, done, errors = _read_status(sf)
                finished_before += len(started)
                for idx, msg in errors.items():
                    raised[job_key(chunk[idx])] = msg
                if rc == 0:
                    continue
                tail = log_tail(log)
                if not started:      # it never reached a job (import failure): no retry
                    for job in chunk:
                        failed.setdefault(job_key(job), f"warm-up worker failed to start (rc={rc}{tail})")
                    continue
                last = started[-1]
                if last not in done and last not in errors:
                    failed[job_key(chunk[last])] = f"crashed in the warm-up worker (rc={rc}{tail})"
                rest = chunk[last + 1:]
                if rest and restarts < MAX_RESTARTS:
                    restarts += 1
                    launch(rest)
                else:
                    for job in rest:
                        failed.setdefault(job_key(job), f"not warmed: workers kept dying (rc={rc})")
    if on_progress is not None:
        on_progress(len(jobs), len(jobs))
    return {"jobs": len(jobs), "workers": workers, "seconds": round(time.time() - t0, 1), "crashed": failed,
            "raised": raised}


def worker(jobs_file: str, status_file: str, builders: dict) -> int:
    """Run each job of ``jobs_file`` once by ``builders[job["kind"]]``, logging ``start i`` /
    ``done i`` / ``error i msg`` lines (flushed one by one, so a crash leaves the job it died in
    behind)."""
    jobs = json.loads(Path(jobs_file).read_text())
    with open(status_file, "a", buffering=1) as st:
        for i, job in enumerate(jobs):
            st.write(f"start {i}\n")
            try:
                builders[job["kind"]](job)
            except Exception as exc:
                msg = " ".join(str(exc).split())[:160]
                st.write(f"error {i} {type(exc).__name__}: {msg}\n")
                continue
            st.write(f"done {i}\n")
    return 0


def builders_of(spec: str) -> dict:
    """The builders dict named "module:name"."""
    import importlib

    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


if __name__ == "__main__":          # python -m fp8gemm.workers jobs_file status_file module:builders
    sys.exit(worker(sys.argv[1], sys.argv[2], builders_of(sys.argv[3])))
