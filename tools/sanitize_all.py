"""The four compute-sanitizer tools over tools/sanitize.py's cases, in one command that fails on any
error: a plain run first (compiles every kernel into CuPy's disk cache in parallel and checks the
outputs), then memcheck, racecheck, synccheck and initcheck, each split over processes (shards)
that run side by side on the one GPU. One line per tool, every process's log under LOGDIR.

    python3 tools/sanitize_all.py LOGDIR [--tools memcheck,racecheck,...] [--only TAGS]
        [--shards N] [--racecheck-shards N] [--jobs N] [--timeout S] [--no-plain]
        [--sanitizer PATH] [--racecheck-report analysis|hazard|all]

--only TAGS is sanitize.py's (a subset of its cases: general, split, swap_ab, short_k, gemv, wg3,
dense, grouped, moe, quantizer). Exit status 0 only if every tool ran to its summary with
no error (racecheck: no hazard, errors and warnings alike) and every case's output was right.
NOTES: racecheck is the slow one (every shared-memory access checked), so it gets the most shards;
a shard is one process, so the tools' wall time is about the slowest shard's.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
SANITIZE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sanitize.py")
ERROR_EXIT = 9                 # --error-exitcode: the sanitizer found something

_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+errors?")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY:\s*(\d+)\s+hazards?\s+displayed\s*"
                           r"\((\d+)\s+errors?,\s*(\d+)\s+warnings?\)")
_CASE = re.compile(r"^(ok|BAD)\s", re.M)
_FIRST_REPORT = re.compile(r"^=+\s+((?:Error|Warning|ERROR|WARN|Invalid|Uninitialized|Barrier|Race)\b.*)$", re.M)


@dataclass
class LogSummary:
    """What one process's log says: the sanitizer's summary (None where it never printed one: the
    process died or timed out), its count of cases right and wrong, and its first report."""
    errors: int | None = None
    hazards: int | None = None
    warnings: int = 0
    ok_cases: int = 0
    bad_cases: int = 0
    first_report: str = ""


def parse_log(text: str) -> LogSummary:
    """Read a compute-sanitizer log of one sanitize.py process. memcheck, synccheck and initcheck
    end with "ERROR SUMMARY: N errors"; racecheck with "RACECHECK SUMMARY: N hazards displayed
    (E errors, W warnings)" (where a version prints an ERROR SUMMARY as well, that one counts)."""
    s = LogSummary()
    errors = [int(m.group(1)) for m in _ERROR_SUMMARY.finditer(text)]
    races = [tuple(int(v) for v in m.groups()) for m in _RACE_SUMMARY.finditer(text)]
    if races:
        s.hazards = sum(r[0] for r in races)
        s.warnings = sum(r[2] for r in races)
    if errors:
        s.errors = sum(errors)
    elif races:
        s.errors = sum(r[1] for r in races)
    s.ok_cases = sum(m.group(1) == "ok" for m in _CASE.finditer(text))
    s.bad_cases = sum(m.group(1) == "BAD" for m in _CASE.finditer(text))
    first = _FIRST_REPORT.search(text)
    if first:
        s.first_report = first.group(1).strip()[:160]
    return s


@dataclass
class ProcResult:
    """One process: its log's path, exit code (None: killed at the timeout) and seconds."""
    log: str
    returncode: int | None
    seconds: float
    summary: LogSummary = field(default_factory=LogSummary)


def shard_problems(tool: str, r: ProcResult) -> list:
    """Why one process's run is not clean, beyond the error counts: a timeout, no summary, an exit
    status its counts do not explain (a crash, an exception outside the cases), a first report."""
    name = os.path.basename(r.log)
    s = r.summary
    if r.returncode is None:
        return [f"{name}: timed out"]
    if tool != "plain" and s.errors is None:
        return [f"{name}: no sanitizer summary (exit {r.returncode})"]
    found = (s.errors or 0) + (s.hazards or 0)
    explained = {0: True, 1: s.bad_cases > 0, ERROR_EXIT: tool != "plain" and found > 0}
    problems = [] if explained.get(r.returncode, False) else [f"{name}: exit {r.returncode}"]
    if found and s.first_report:
        problems.append(f"{name}: {s.first_report}")
    return problems


def verdict(tool: str, results: list) -> tuple:
    """(passed, one line) for a tool's processes. It fails on a sanitizer error, a racecheck hazard
    of either severity, a wrong output, or a process without a clean end (shard_problems)."""
    problems = [p for r in results for p in shard_problems(tool, r)]
    errors = sum(r.summary.errors or 0 for r in results)
    hazards = sum(r.summary.hazards or 0 for r in results)
    warnings = sum(r.summary.warnings for r in results)
    ok = sum(r.summary.ok_cases for r in results)
    bad = sum(r.summary.bad_cases for r in results)
    if tool == "racecheck":
        counts, found = f"{hazards} hazards ({errors} errors, {warnings} warnings)", hazards + errors
    elif tool == "plain":
        counts, found = "no sanitizer", 0
    else:
        counts, found = f"{errors} errors", errors
    passed = found == 0 and bad == 0 and not problems
    seconds = max((r.seconds for r in results), default=0.0)
    line = (f"{tool:10} {'PASS' if passed else 'FAIL'}  {counts}, {ok} cases ok, {bad} bad, "
            f"{len(results)} processes, {seconds:.0f} s")
    if problems:
        line += "  | " + "; ".join(problems[:3])
    return passed, line


def _run(cmd: list, log: str, timeout: float) -> ProcResult:
    start = time.time()
    with open(log, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = None
    with open(log, errors="replace") as f:
        text = f.read()
    return ProcResult(log, rc, time.time() - start, parse_log(text))


def commands(args) -> list:
    """(tool, log path, command) of every process: the plain shards, then each tool's."""
    only = ["--only", args.only] if args.only else []
    py = [sys.executable, SANITIZE] + only
    out = []
    if not args.no_plain:
        for i in range(args.jobs):
            out.append(("plain", os.path.join(args.logdir, f"plain.{i}.log"), py + ["--shard", f"{i}/{args.jobs}"]))
    for tool in args.tools:
        shards = args.racecheck_shards if tool == "racecheck" else args.shards
        extra = ["--racecheck-report", args.racecheck_report] if tool == "racecheck" else []
        for i in range(shards):
            cmd = [args.sanitizer, "--tool", tool, "--error-exitcode", str(ERROR_EXIT), "--print-limit", "20"] + \
                extra + py + ["--shard", f"{i}/{shards}"]
            out.append((tool, os.path.join(args.logdir, f"{tool}.{i}.log"), cmd))
    return out


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logdir")
    ap.add_argument("--tools", default=",".join(TOOLS), type=lambda v: [t for t in v.split(",") if t])
    ap.add_argument("--only", default="")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--racecheck-shards", type=int, default=6)
    ap.add_argument("--jobs", type=int, default=min(12, os.cpu_count() or 2),
                    help="processes at once (each tool's shards, and the plain run's)")
    ap.add_argument("--timeout", type=float, default=420.0, help="seconds per process")
    ap.add_argument("--no-plain", action="store_true", help="skip the plain (compile and check) run")
    ap.add_argument("--sanitizer", default="compute-sanitizer")
    ap.add_argument("--racecheck-report", default="analysis", choices=("analysis", "hazard", "all"))
    args = ap.parse_args(argv)
    unknown = set(args.tools) - set(TOOLS)
    if unknown:
        ap.error(f"unknown tools {sorted(unknown)}; known: {', '.join(TOOLS)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    os.makedirs(args.logdir, exist_ok=True)
    start = time.time()
    cmds = commands(args)
    lines, passed_all = [], True
    # The plain run alone first: the sanitizer processes then load every kernel from the cache
    # instead of compiling it under the tool (and all at once).
    for phase in (["plain"], args.tools):
        batch = [c for c in cmds if c[0] in phase]
        if not batch:
            continue
        with ThreadPoolExecutor(max(1, args.jobs)) as ex:
            results = list(ex.map(lambda c: _run(c[2], c[1], args.timeout), batch))
        for tool in phase:
            mine = [r for c, r in zip(batch, results) if c[0] == tool]
            if mine:
                ok, line = verdict(tool, mine)
                passed_all &= ok
                lines.append(line)
                print(line, flush=True)
    total = f"sanitize_all: {'PASS' if passed_all else 'FAIL'} in {time.time() - start:.0f} s, logs in {args.logdir}"
    print(total, flush=True)
    with open(os.path.join(args.logdir, "summary.txt"), "w") as f:
        f.write("\n".join(lines + [total]) + "\n")
    return 0 if passed_all else 1


if __name__ == "__main__":
    sys.exit(main())
