"""fp8gemm-tune: time each shape's kernel candidates on the GPU and write the dispatch table.

    fp8gemm-tune                                    # the built-in trace -> <user tables>/<gpu>.json
    fp8gemm-tune --out dispatch/h200.json           # the shipped table (on an H200)
    fp8gemm-tune --m 1,64,4096 --n 4096 --k 4096    # a product of M, N, K values
    fp8gemm-tune --budget-minutes 10                # stop starting shapes after 10 minutes
    fp8gemm-tune --state tune-state.json            # resumable: finished shapes are not redone
    fp8gemm-tune --k 256 --update                   # retune some shapes, keep the table's others
    fp8gemm-tune --warm-workers 0                   # compile each candidate on its first call

Per shape: the candidates are the shape-based fallback's own choice plus a neighbourhood of it
(orientation, block_n, K splits, stages, raster group), ranked by the fallback's time model and
cut to --max-candidates. Before timing, every candidate of every shape is compiled once in
--warm-workers processes (CuPy's disk cache then serves the timing process; one NVRTC compile
takes seconds, and a tuning run meets a hundred or more kernels). All are timed in one profiler
session (L2 cold, CUPTI device time, median of --iters; see timing.py); the fastest is run once
more and checked against the float64 reference, and only a correct winner enters the table. Each
entry records the winner's time and the fallback's time in the same run, so the table shows what
tuning bought.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

from fp8gemm.dispatch import Candidate, GemmDesc, is_valid
from fp8gemm.dispatch import selector as sel
from fp8gemm.dispatch.variant import DEFAULT_NUM_SMS

from .cli import OURS_TOL, _int_list, require_gpu, resolve_shapes

STATE_VERSION = 2             # results hold the variant and its own knobs


# ---- the search space (CPU) ---------------------------------------------------------------------

def candidates(desc: GemmDesc, num_sms: int = DEFAULT_NUM_SMS, limit: int = 16) -> list:
    """The fallback's choice first (and the older kernels' model choice where that is the dense
    kernel), then each variant's tuner_candidates (in sel.TUNER_ORDER) that
    are valid for the shape, at most ``limit`` in all (the fallback is always kept), then the
    dense kernel's few (sel.EXTRA_CANDIDATES: beyond the limit, so that they take no slot from
    the older kernels' neighbourhoods, e.g. the K splits at small N)."""
    fallback = sel.fallback(desc, num_sms)
    out, seen = [fallback], {fallback.key()}
    older = sel.fallback(desc, num_sms, dense=False)     # where the dense model chose, the older kernels' too
    if older.key() not in seen:
        out.append(older)
        seen.add(older.key())
    for cls in sel.TUNER_ORDER + sel.EXTRA_CANDIDATES:
        room = limit if cls in sel.TUNER_ORDER else len(out) + 1
        for c in cls.tuner_candidates(desc, num_sms):
            if c.key() not in seen and is_valid(desc, c) and len(out) < room:
                seen.add(c.key())
                out.append(c)
            room += cls not in sel.TUNER_ORDER
    return out


def warm_jobs(shapes, out_dtype: str, num_sms: int = DEFAULT_NUM_SMS, limit: int = 16, done=()) -> list:
    """bench/warm.py jobs that compile every candidate of the shapes not in ``done``: one per
    distinct (candidate, N) (the kernel a candidate compiles to depends on the output type and,
    through the TMA-store rule, on N), those of one candidate next to each other."""
    jobs, seen = [], set()
    for m, n, k in shapes:
        if shape_key(m, n, k, out_dtype) in done:
            continue
        for c in candidates(GemmDesc(m, n, k, out_dtype), num_sms, limit):
            if (c.key(), n) not in seen:
                seen.add((c.key(), n))
                jobs.append({"kind": "fp8gemm_candidate", "m": m, "n": n, "k": k, "out_dtype": out_dtype,
                             "config": {"variant": c.variant, **c.knobs()}})
    jobs.sort(key=lambda j: json.dumps(j["config"], sort_keys=True))
    return jobs


def warm_job(job) -> None:
    """A warm-up worker's job: one call of the candidate on zero operands (compiles it into CuPy's
    disk cache)."""
    import torch

    import fp8gemm

    from .peers import Inputs

    x = Inputs.zeros(job["m"], job["n"], job["k"])
    fp8gemm.matmul(x.a, x.b, x.sa, x.sb, out_dtype=job["out_dtype"], config=sel.from_entry(job["config"]))
    torch.cuda.synchronize()


# kind -> builder for the tuner's warm-up workers (bench/warm.py)
WARM_BUILDERS = {"fp8gemm_candidate": warm_job}


def warm_skips(report: dict) -> set:
    """(candidate key, N) of the warm-up jobs that crashed their worker: the timing process must
    not run them."""
    skip = set()
    for key in report["crashed"]:
        job = json.loads(key)
        skip.add((sel.from_entry(job["config"]).key(), job["n"]))
    return skip


# ---- the tuning loop (CPU logic; the GPU enters through time_fn and check_fn) -----------------

def label(c: Candidate) -> str:
    """A short name of a candidate for the state file, e.g. short_k 128x64 or general 128x32 s4 g8 k2."""
    return c.label()


def shape_key(m: int, n: int, k: int, out_dtype: str) -> str:
    return f"{m},{n},{k},{out_dtype}"


def load_state(path: Path | None, gpu: str) -> dict:
    """The saved progress, or a fresh one. A state of another GPU or version is not reused."""
    fresh = {"version": STATE_VERSION, "gpu": gpu, "results": {}}
    if path is None or not path.exists():
        return fresh
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"fp8gemm-tune: ignoring unreadable state {path}: {exc}", file=sys.stderr)
        return fresh
    if state.get("version") != STATE_VERSION or state.get("gpu") != gpu:
        print(f"fp8gemm-tune: {path} is for {state.get('gpu')!r} (version {state.get('version')}); starting over",
              file=sys.stderr)
        return fresh
    return state


def save_json(path: Path, obj) -> None:
    """Write atomically: a crash leaves the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    os.replace(tmp, path)


def tune(shapes, out_dtype: str, time_fn, check_fn, state: dict, *, budget_s: float | None = None,
         limit: int = 16, num_sms: int = DEFAULT_NUM_SMS, save=None, clock=time.monotonic,
         progress=None, skip=frozenset()) -> dict:
    """Tune every shape not yet in ``state["results"]``, leaving out the candidates in ``skip``
    ((candidate key, N) pairs: warm_skips).

    time_fn(desc, [Candidate]) -> {candidate key: us}; check_fn(desc, Candidate) -> relative error.
    A shape whose fastest candidate fails the check gets the next fastest that passes; a shape
    with none is recorded as failed (no table entry). Stops before a new shape once ``budget_s``
    seconds have passed. ``save(state)`` runs after each shape. Returns the state."""
    start = clock()
    todo = [s for s in shapes if shape_key(*s, out_dtype) not in state["results"]]
    for i, (m, n, k) in enumerate(todo):
        if budget_s is not None and clock() - start >= budget_s:
            state["stopped"] = f"budget of {budget_s:.0f} s spent; {len(todo) - i} shape(s) left"
            break
        if progress:
            progress(i, len(todo), (m, n, k))
        desc = GemmDesc(m, n, k, out_dtype)
        cands = candidates(desc, num_sms, limit)
        fallback = cands[0]
        cands = [c for c in cands if (c.key(), n) not in skip]
        times = time_fn(desc, cands) if cands else {}
        fallback_us = times.get(fallback.key())
        ranked = sorted((c for c in cands if c.key() in times), key=lambda c: times[c.key()])
        result = {"m": m, "n": n, "k": k, "out_dtype": out_dtype, "fallback_us": fallback_us,
                  "tried": len(cands),
                  "times": {label(c): round(times[c.key()], 3) for c in cands if c.key() in times}}
        for c in ranked:
            err = check_fn(desc, c)
            if err <= OURS_TOL[out_dtype]:
                result.update({"variant": c.variant, **c.knobs()})
                result.update({"us": times[c.key()], "rel_err": err})
                break
        else:
            result["failed"] = "no candidate passed the correctness check"
        state["results"][shape_key(m, n, k, out_dtype)] = result
        if save:
            save(state)
    else:
        state.pop("stopped", None)
    if progress:
        progress(len(todo), len(todo), None)
    return state


def table_from_state(state: dict, meta: dict, keep: list | None = None) -> dict:
    """The dispatch table (dispatch/<gpu>.json) of every tuned shape, sorted by (N, K, M); with
    ``keep`` (an earlier table's entries), those of shapes this state did not tune stay."""
    tuned = {(r["n"], r["k"], r["m"]) for r in state["results"].values()}
    entries = [e for e in keep or [] if (e["n"], e["k"], e["m"]) not in tuned]
    for r in state["results"].values():
        if "failed" in r or r.get("out_dtype", "bfloat16") != "bfloat16":
            continue          # the table serves bf16 (and fp16: same smem); fp32 keeps the fallback
        entries.append({"n": r["n"], "k": r["k"], "m": r["m"], "variant": r["variant"], **sel.from_entry(r).knobs(),
                        "us": round(r["us"], 3),
                        "fallback_us": None if r["fallback_us"] is None else round(r["fallback_us"], 3)})
    entries.sort(key=lambda e: (e["n"], e["k"], e["m"]))
    return {"gpu": state["gpu"],
            "note": "Written by fp8gemm-tune. Entries keyed by (n, k) then nearest m within a factor "
                    "of 2; other shapes use the shape-based fallback (dispatch/selector.py). us and "
                    "fallback_us are the winner's and the fallback's device times in the same run.",
            "generated": meta, "entries": entries}


# ---- the GPU side ------------------------------------------------------------------------------

def _gpu_functions(iters: int, seed: int):
    import cupy

    import fp8gemm
    from fp8gemm import reference
    from fp8gemm.testing import as_float64, random_case

    from .timing import L2Flush, time_calls

    flush = L2Flush()
    cache = {}

    def case_of(desc):
        if desc not in cache:
            cache.clear()
            case = random_case(desc.m, desc.n, desc.k, seed=seed + desc.m * 131 + desc.n * 7 + desc.k)
            cache[desc] = (case, case.as_torch())
        return cache[desc]

    def time_fn(desc, cands):
        _, (a, b, sa, sb) = case_of(desc)
        fns = {}
        for c in cands:
            fns[c.key()] = (lambda c=c: fp8gemm.matmul(a, b, sa, sb, out_dtype=desc.out_dtype, config=c))
            fns[c.key()]()                       # compile and warm up
        cupy.cuda.Device().synchronize()
        return time_calls(fns, flush, iters)

    def check_fn(desc, c):
        case, (a, b, sa, sb) = case_of(desc)
        out = fp8gemm.matmul(a, b, sa, sb, out_dtype=desc.out_dtype, config=c)
        return reference.rel_fro_error(as_float64(out), case.reference(cupy))

    return time_fn, check_fn


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fp8gemm-tune", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", type=Path, help="CSV with columns M,N,K (default: the built-in trace)")
    p.add_argument("--m", type=_int_list, help="M values: with --n and --k their product, else the "
                                               "trace's (N, K) pairs at these M")
    p.add_argument("--n", type=_int_list)
    p.add_argument("--k", type=_int_list)
    p.add_argument("--out-dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--out", type=Path, default=None,
                   help="table to write (default: <user table dir>/<gpu>.json, where fp8gemm finds it: "
                        "$FP8GEMM_TABLE_DIR or ~/.cache/fp8gemm/tables)")
    p.add_argument("--state", type=Path, help="progress file (default: the table path + .state.json)")
    p.add_argument("--update", action="store_true",
                   help="keep the --out table's entries for shapes not tuned in this run")
    p.add_argument("--budget-minutes", type=float, help="start no new shape after this many minutes")
    p.add_argument("--max-candidates", type=int, default=16)
    p.add_argument("--iters", type=int, default=10, help="timed calls per candidate (median)")
    p.add_argument("--gpu", default=None, help="table name (default: this GPU's, e.g. h200 or h100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warm-workers", type=int, default=None,
                   help="processes that compile the candidates before timing (default: CPU count - 2, at most "
                        "12; 0: none, each compiles on its first call)")
    return p


def resolve(args) -> list:
    """fp8gemm-bench's shape rules (cli.resolve_shapes); M = 0 has nothing to tune."""
    return [s for s in resolve_shapes(args, "fp8gemm-tune") if s[0] >= 1]


def _progress_bar(i, total, shape, t0=[None]):   # noqa: B006 (start time kept across calls)
    t0[0] = t0[0] or time.monotonic()
    done = int(30 * i / max(total, 1))
    label = "done" if shape is None else "M=%d N=%d K=%d" % shape
    sys.stderr.write(f"\r[{'#' * done}{'.' * (30 - done)}] {i}/{total} {time.monotonic() - t0[0]:6.0f}s {label:24}")
    if shape is None:
        sys.stderr.write("\n")
    sys.stderr.flush()


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.warm_workers is not None and args.warm_workers < 0:
        raise SystemExit("fp8gemm-tune: --warm-workers must be 0 (no warm-up) or more")
    shapes = resolve(args)
    require_gpu("fp8gemm-tune")
    import cupy

    from fp8gemm.dispatch import selector as sel
    if args.gpu is None:
        args.gpu = sel.gpu_key(cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode())
    if args.out is None:
        args.out = sel.user_table_dir() / f"{args.gpu}.json"
    state_path = args.state or args.out.with_name(args.out.stem + ".state.json")
    state = load_state(state_path, args.gpu)

    time_fn, check_fn = _gpu_functions(args.iters, args.seed)
    dev = cupy.cuda.Device()
    num_sms = dev.attributes["MultiProcessorCount"]
    budget = None if args.budget_minutes is None else 60.0 * args.budget_minutes
    skip = set()
    if args.warm_workers != 0:
        from .warm import default_workers, warm

        jobs = warm_jobs(shapes, args.out_dtype, num_sms, args.max_candidates, state["results"])
        report = warm(jobs, args.warm_workers or default_workers(), builders="fp8gemm.bench.tune:WARM_BUILDERS")
        skip = warm_skips(report)
        print(f"fp8gemm-tune: compiled {report['jobs']} candidates in {report['workers']} processes, "
              f"{report['seconds']:.0f} s; {len(skip)} crashed (left out), {len(report['raised'])} raised",
              file=sys.stderr)
        for key, why in list(report["crashed"].items()) + list(report["raised"].items()):
            print(f"  {json.loads(key)['config']} at N = {json.loads(key)['n']}: {why}", file=sys.stderr)
    tune(shapes, args.out_dtype, time_fn, check_fn, state, budget_s=budget, limit=args.max_candidates,
         num_sms=num_sms, save=lambda s: save_json(state_path, s), progress=_progress_bar, skip=skip)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu_name": cupy.cuda.runtime.getDeviceProperties(dev.id)["name"].decode(),
            "iters": args.iters, "max_candidates": args.max_candidates, "num_sms": num_sms,
            "timing": "L2-cold, CUPTI device time, median", "shapes_requested": len(shapes),
            "stopped": state.get("stopped")}
    keep = None
    if args.update and args.out.exists():
        old = json.loads(args.out.read_text())
        keep = old["entries"]
        meta["kept_entries_from"] = old.get("generated")     # the run that tuned the kept entries
    table = table_from_state(state, meta, keep)
    save_json(args.out, table)
    gains = [e["fallback_us"] / e["us"] for e in table["entries"] if e["fallback_us"]]
    failed = sum(1 for r in state["results"].values() if "failed" in r)
    print(f"fp8gemm-tune: {len(table['entries'])} entries in {args.out}; {failed} shape(s) failed the check"
          + (f"; fallback/tuned time: median {sorted(gains)[len(gains) // 2]:.3f}, max {max(gains):.3f}"
             if gains else "") + (f"; {state['stopped']}" if state.get("stopped") else ""))
    if args.out.resolve() != sel.table_path(args.gpu).resolve():
        print(f"fp8gemm-tune: fp8gemm reads {sel.table_path(args.gpu)} on this GPU; set FP8GEMM_TABLE={args.out} "
              f"to use this table", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
