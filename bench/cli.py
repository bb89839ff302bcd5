"""fp8gemm-bench: time fp8gemm against cuBLASLt, Triton and DeepGEMM on a shape trace, one run.

    fp8gemm-bench                      # the built-in DeepSeek-V4-Flash trace (264 shapes)
    fp8gemm-bench --quick              # 20 representative shapes, under a minute
    fp8gemm-bench --unseen             # other models' shapes the tuned table never saw (224)
    fp8gemm-bench --m 1,64 --n 4096 --k 4096 --variant sm90_fp8_gemm_general
    fp8gemm-bench --csv bench/results/h200.csv --plot bench/results/h200.png
    fp8gemm-bench --quick --batch-invariant   # the batch-invariant mode beside the default, and its cost
    fp8gemm-bench --moe --batch-invariant     # the same for the MoE layer
    fp8gemm-bench --moe --csv bench/results/h200_moe.csv   # the MoE layer (moe.py), V4-Flash and -Pro

Timing: L2 flushed by a read kernel before every call, device time from CUPTI (torch.profiler),
median of --iters calls; see timing.py. Each output (ours and every peer's) is checked against
the float64 reference first; a peer that is wrong is reported as wrong and not timed.
"""
from __future__ import annotations

import argparse
import datetime
import platform
import subprocess
import sys
import time
from pathlib import Path

from fp8gemm.shapes import read_shapes as _read_shapes
from fp8gemm.shapes import other_models_path, trace_path

from . import report
from .moe import MODELS as MOE_MODELS, ROUTINGS as MOE_ROUTINGS, TOKENS as MOE_TOKENS
from .peers import PEERS, _first_line, available
from .provenance import provenance
from .timing import GRAPH_REPS

QUICK_M = (1, 32, 128, 512, 4096)
QUICK_NK = ((512, 4096), (1536, 4096), (4096, 1024), (8192, 256))
PEER_TOL = 4e-3          # a peer output further than this from the reference is "wrong"
OURS_TOL = {"bfloat16": 4e-3, "float16": 1e-3, "float32": 1e-4}
CUPTI_METHOD = ("CUPTI via torch.profiler, L2 flushed by a 256 MiB read kernel before each call, sum of all "
                "device activities per call")
GRAPH_METHOD = (f"CUDA-graph replay: [flush, call] x {GRAPH_REPS} minus [flush] x {GRAPH_REPS}, per replay, "
                "L2 flushed by a 256 MiB read kernel before each call (kernels and the gaps between graph nodes)")


def _int_list(text: str):
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not vals or any(v < 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected non-negative integers, got {text!r}")
    return vals


def _peer_list(text: str):
    if text.strip().lower() in ("none", ""):
        return []
    names = [p.strip().lower() for p in text.split(",") if p.strip()]
    bad = [p for p in names if p not in PEERS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown peer(s) {', '.join(bad)}; choose from {', '.join(PEERS)}")
    return names


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fp8gemm-bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_argument_group("shapes (default: the built-in DeepSeek-V4-Flash trace)")
    src.add_argument("--shapes", type=Path, help="CSV file with columns M,N,K")
    src.add_argument("--m", type=_int_list, help="M values; alone, they replace the trace's M values")
    src.add_argument("--n", type=_int_list, help="N values (with --k: their product with --m)")
    src.add_argument("--k", type=_int_list, help="K values (multiples of 16)")
    src.add_argument("--quick", action="store_true", help="a 20-shape representative subset")
    src.add_argument("--unseen", action="store_true",
                     help="the unseen list (fp8gemm/other_models.csv): other models' (N, K) at other M values, "
                          "shapes the tuned tables never saw")
    p.add_argument("--out-dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--variant", help="force one fp8gemm kernel variant (see fp8gemm.dispatch.variants())")
    p.add_argument("--a-scale", default="k-major", choices=("k-major", "m-major"),
                   help="the A scales fp8gemm gets: row-major (quantize_per_token_group's default) or M-major "
                        "with 16-byte aligned columns (its m_major_scales=True), made outside the timing")
    p.add_argument("--batch-invariant", action="store_true",
                   help="also time fp8gemm.matmul(batch_invariant=True) beside the default mode (same run, same "
                        "timer; column 'invariant') and summarize its cost: its time / the default's and / "
                        "DeepGEMM's, per M band; with --moe, fp8gemm.moe(batch_invariant=True) beside the "
                        "default layer, its time / the default layer's and / the unfused chain's, per token range")
    p.add_argument("--peers", type=_peer_list, default=list(PEERS),
                   help=f"comma-separated peers to include (default: {','.join(PEERS)}; 'none' for none)")
    p.add_argument("--iters", type=int, default=20, help="timed calls per kernel (median; >= 5)")
    p.add_argument("--timer", default="cupti", choices=("cupti", "graph"),
                   help="cupti: each call's kernel durations (default); graph: CUDA-graph replay of "
                        "[flush, call] x 10 minus the flushes alone (kernels and launch gaps; see timing.py)")
    p.add_argument("--csv", type=Path, help="write one row per shape here")
    p.add_argument("--json", type=Path, help="metadata + summary (default: the CSV path with .json)")
    p.add_argument("--plot", type=Path, help="write a PNG of speedup vs M per (N, K) (needs matplotlib)")
    p.add_argument("--no-check", action="store_true", help="skip the correctness checks")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warm-workers", type=int, default=None,
                   help="processes that warm DeepGEMM's JIT cache before timing (default: CPU count - 2, "
                        "at most 12; 0: no warm-up, it then compiles on its first timed shape)")
    moe = p.add_argument_group("MoE layer (instead of the GEMM trace; see fp8gemm/bench/moe.py)")
    moe.add_argument("--moe", action="store_true", help="time fp8gemm.moe on DeepSeek-V4-Flash and -Pro")
    moe.add_argument("--moe-models", type=_name_list(MOE_MODELS), default=list(MOE_MODELS),
                     help=f"comma-separated models (default: {','.join(MOE_MODELS)})")
    moe.add_argument("--moe-tokens", type=_int_list, default=list(MOE_TOKENS),
                     help=f"token counts (default: {','.join(map(str, MOE_TOKENS))})")
    moe.add_argument("--moe-routings", type=_name_list(MOE_ROUTINGS), default=list(MOE_ROUTINGS),
                     help=f"routings (default: {','.join(MOE_ROUTINGS)})")
    return p


def _name_list(known):
    def parse(text: str):
        names = [v.strip() for v in text.split(",") if v.strip()]
        bad = [v for v in names if v not in known]
        if bad or not names:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(bad) or 'empty list'}; known: {', '.join(known)}")
        return names
    return parse


def read_shapes(path) -> list:
    """fp8gemm.shapes.read_shapes, its error as the CLI's."""
    try:
        return _read_shapes(path)
    except ValueError as exc:
        raise SystemExit(f"fp8gemm-bench: {exc}") from exc


def resolve_shapes(args, prog: str = "fp8gemm-bench"):
    """The shape list the arguments ask for, in order, without duplicates: --quick, the product
    of --m/--n/--k, or the trace (--shapes or built in) with its M values replaced by --m."""
    if getattr(args, "unseen", False) and (getattr(args, "quick", False) or args.shapes or args.n or args.k):
        raise SystemExit(f"{prog}: --unseen is a shape list of its own; it takes --m (its M values replaced) "
                         f"but not --quick, --shapes, --n or --k")
    if getattr(args, "quick", False):
        shapes = [(m, n, k) for (n, k) in QUICK_NK for m in QUICK_M]
    elif args.n or args.k:
        if not (args.m and args.n and args.k):
            raise SystemExit(f"{prog}: --n and --k need --m too (their product is used)")
        shapes = [(m, n, k) for n in args.n for k in args.k for m in args.m]
    else:
        shapes = read_shapes(args.shapes or (other_models_path() if getattr(args, "unseen", False) else trace_path()))
        if args.m:
            pairs = list(dict.fromkeys((n, k) for _, n, k in shapes))
            shapes = [(m, n, k) for (n, k) in pairs for m in args.m]
    seen, out = set(), []
    for s in shapes:
        if s not in seen:
            seen.add(s)
            out.append(s)
    bad = [s for s in out if s[2] % 16 or s[2] == 0 or s[1] == 0]
    if bad:
        raise SystemExit(f"{prog}: K must be a positive multiple of 16 and N >= 1; bad: {bad[:5]}")
    return out


def environment() -> dict:
    import cupy

    import fp8gemm

    env = {"python": platform.python_version(), "fp8gemm": fp8gemm.__version__, "cupy": cupy.__version__}
    props = cupy.cuda.runtime.getDeviceProperties(0)
    env["gpu"] = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    env["sm_count"] = props["multiProcessorCount"]
    env["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
    env["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
    smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True) if _which("nvidia-smi") else None
    env["driver"] = smi.stdout.strip() if smi and smi.returncode == 0 else None
    for mod in ("torch", "triton", "deep_gemm", "jax"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception:
            env[mod] = None
    return env


def _which(cmd):
    from shutil import which

    return which(cmd)


def measure_ceilings(flush, iters: int) -> dict:
    """Device-to-device copy bandwidth (bytes read + written) and FP8 dense peak (tensorwise
    cuBLAS through torch, 8192^3), both measured now with the bench's own timer."""
    import torch

    from .timing import time_calls

    nbytes = 1 << 30
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    s = 8192
    a = torch.randn((s, s), device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn((s, s), device="cuda").to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")

    def copy():
        dst.copy_(src)

    def mm():
        return torch._scaled_mm(a, b.t(), one, one, out_dtype=torch.bfloat16)

    copy(), mm()
    torch.cuda.synchronize()
    t = time_calls({"copy": copy, "mm": mm}, flush, iters)
    return {"copy_bandwidth_bytes_per_s": 2 * nbytes / (t["copy"] * 1e-6),
            "fp8_dense_peak_flops": 2.0 * s ** 3 / (t["mm"] * 1e-6),
            "copy_us": t["copy"], "fp8_8192_cubed_us": t["mm"]}


class Progress:
    def __init__(self, total: int):
        self.total, self.t0 = total, time.time()

    def update(self, i: int, label: str):
        if not sys.stderr.isatty() and i % 10 and i != self.total:
            return
        width = 30
        done = int(width * i / max(self.total, 1))
        el = time.time() - self.t0
        sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {i}/{self.total} {el:5.0f}s {label:<24}")
        if i == self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def warm_deepgemm(jobs, workers):
    """Warm DeepGEMM's kernel cache for these jobs (bench/warm.py) in parallel. Returns (the report
    for the JSON, [(job, reason)] of the jobs that crashed a worker: those are not timed)."""
    import json

    from .warm import default_workers, warm

    if not jobs or workers == 0:
        return None, []
    res = warm(jobs, workers or default_workers())
    print(f"deepgemm warm-up: {res['jobs']} calls in {res['workers']} processes, {res['seconds']:.0f} s; "
          f"{len(res['crashed'])} crashed, {len(res['raised'])} raised", file=sys.stderr)
    for key, why in list(res["crashed"].items())[:10]:
        print(f"  crashed: {key}: {why}", file=sys.stderr)
    return res, [(json.loads(key), why) for key, why in res["crashed"].items()]


def host_overhead_us(fn, calls: int = 30) -> float:
    """Wall-clock host time per eager call (no synchronisation inside the loop)."""
    import cupy

    fn()
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    cupy.cuda.Device().synchronize()
    return (t1 - t0) / calls * 1e6


def host_batched_us(fn, calls: int = 1000, batch: int = 50, sync=None) -> float:
    """Host time per call, in batches of ``batch`` with a device sync between batches (outside
    the timed part), so that the launch queue never fills and blocks the host. ``sync``: the
    caller's framework's device sync (default CuPy's)."""
    if sync is None:
        import cupy

        sync = cupy.cuda.Device().synchronize
    fn()
    sync()
    total = 0.0
    for _ in range(calls // batch):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        total += time.perf_counter() - t0
        sync()
    return total / (calls // batch * batch) * 1e6


def host_phase(shapes, args) -> dict:
    """{(m, n, k): host microseconds per eager call} for every shape, measured before any profiler
    session: a finished torch.profiler (CUPTI) session can leave every later launch slower, and
    callers run without one (tools/host_profile.py measures both)."""
    import fp8gemm
    from fp8gemm.dispatch import select
    from fp8gemm.launcher import gpu_key
    from fp8gemm.testing import random_case

    res = {}
    for m, n, k in shapes:
        case = random_case(m, n, k, seed=args.seed + m * 131 + n * 7 + k)
        forced = None
        if args.variant:
            try:
                forced = select(m, n, k, args.out_dtype, gpu=gpu_key(0), force_variant=args.variant)
            except ValueError:
                forced = None
        res[(m, n, k)] = host_overhead_us(lambda: fp8gemm.matmul(
            case.a, case.b, case.a_scale, case.b_scale, out_dtype=args.out_dtype, config=forced), calls=100)
    return res


def host_floor(out_dtype: str) -> dict:
    """The host time of our fast path next to its floor, for one decode shape (M=64, N=K=4096):
    the same plan's output allocation plus its launch through CuPy's cuLaunchKernel and nothing
    else, which any Python implementation pays (host overhead)."""
    import cupy
    from cupy_backends.cuda.api.driver import launchKernel

    import fp8gemm
    from fp8gemm import output, plans
    from fp8gemm.testing import random_case

    case = random_case(64, 4096, 4096, seed=1)
    args = (case.a, case.b, case.a_scale, case.b_scale)
    fp8gemm.matmul(*args, out_dtype=out_dtype)
    problem, runner, _ = plans.PLANS[plans.plan_key("matmul", "cupy", out_dtype, *args)]
    stream = cupy.cuda.get_current_stream().ptr
    dtype = output.NP_DTYPES[problem.out_dtype]
    prefix, params = runner.launch_prefix, runner.params.address

    def floor():
        cupy.ndarray(problem.out_shape, dtype)
        launchKernel(*prefix, stream, params, 0)

    ours = [host_overhead_us(lambda: fp8gemm.matmul(*args, out_dtype=out_dtype), calls=200) for _ in range(3)]
    base = [host_overhead_us(floor, calls=200) for _ in range(3)]
    return {"shape": [64, 4096, 4096], "fast_path_us": min(ours), "floor_us": min(base),
            "method": "wall clock over 200 eager calls, best of 3, before any profiler session; floor = "
                      "cupy.ndarray of the output + CuPy's Cython cuLaunchKernel of the same prebuilt plan"}


def m_major_copy(sa):
    """A torch [M, Kb] scale tensor copied into the M-major layout of
    quantize_per_token_group(m_major_scales=True): columns m_major_ld(M) apart, 16-byte aligned."""
    import torch

    from fp8gemm.quantize import m_major_ld

    m, kb = sa.shape
    ld = m_major_ld(m)
    buf = torch.zeros((kb, ld), dtype=sa.dtype, device=sa.device)
    buf[:, :m] = sa.t()
    return torch.as_strided(buf, (m, kb), (1, ld))


def bench_shape(m, n, k, args, flush, peers, dispatch_variant, host_us=None, crashed=None):
    """Time one shape: ours, then every available peer. Returns a report.Row. ``host_us``: the
    host phase's results, if it ran; ``crashed``: {peer: {(m, n, k): reason}} of the calls that
    killed a warm-up worker, which are reported and not run here."""
    import cupy
    import torch

    import fp8gemm
    from fp8gemm import reference
    from fp8gemm.dispatch import select
    from fp8gemm.launcher import gpu_key
    from fp8gemm.testing import as_float64, random_case

    from .peers import PREPARE, Inputs, collect_calls
    from .timing import time_calls, time_calls_graph

    timer = time_calls_graph if getattr(args, "timer", "cupti") == "graph" else time_calls

    row = report.Row(m, n, k, args.out_dtype)
    case = random_case(m, n, k, seed=args.seed + m * 131 + n * 7 + k)
    x = Inputs(case, args.out_dtype)
    notes = []
    try:
        cand = select(m, n, k, args.out_dtype, gpu=gpu_key(0), force_variant=dispatch_variant)
    except ValueError as exc:          # the forced variant does not take this shape
        cand = select(m, n, k, args.out_dtype, gpu=gpu_key(0))
        notes.append(f"--variant refused ({exc}): the dispatcher's choice timed")
    row.variant = cand.variant
    ref = None if args.no_check else case.reference(cupy)

    sa = x.sa if getattr(args, "a_scale", "k-major") == "k-major" else m_major_copy(x.sa)

    def ours():
        return fp8gemm.matmul(x.a, x.b, sa, x.sb, out_dtype=args.out_dtype, config=cand)

    def invariant():
        return fp8gemm.matmul(x.a, x.b, sa, x.sb, out_dtype=args.out_dtype, batch_invariant=True)

    fns = {"ours": ours}
    if getattr(args, "batch_invariant", False):
        fns["invariant"] = invariant
    for label, fn in list(fns.items()):
        out = fn()
        if ref is not None:
            err = reference.rel_fro_error(as_float64(out), ref)
            if label == "ours":
                row.max_rel_err = err
            if not err <= OURS_TOL[args.out_dtype]:
                notes.append(f"{label} WRONG ({err:.1e})")
    ours_fns = dict(fns)

    def check(res):
        if ref is None:
            return None
        err = reference.rel_fro_error(as_float64(res), ref)
        return None if err <= PEER_TOL else f"wrong ({err:.1e})"

    live = [p for p in peers if not (crashed and crashed.get(p, {}).get((m, n, k)))]
    for p in peers:
        if p not in live:
            notes.append(f"{p}: not timed, {crashed[p][(m, n, k)]}")
    peer_fns, peer_choice, peer_notes = collect_calls(live, PREPARE, x, check, sync=torch.cuda.synchronize)
    fns.update(peer_fns)
    notes += peer_notes

    for fn in fns.values():   # warm-up: compile, autotune, allocate
        fn()
    torch.cuda.synchronize()
    try:
        times = timer(fns, flush, args.iters)
    except Exception as exc:          # a peer that checked out but fails under the profiler
        notes.append(f"timing with the peers failed ({type(exc).__name__} {_first_line(exc)}): ours timed alone")
        fns, peer_choice = ours_fns, {}
        times = timer(fns, flush, args.iters)
    row.ours_us = times["ours"]
    row.invariant_us = times.get("invariant")
    for peer in peers:
        labels = peer_choice.get(peer)
        if labels:
            setattr(row, f"{peer}_us", min(times[f"{peer}:{lb}"] for lb in labels))
            if peer == "cublaslt" and len(labels) > 1:   # every correct API path, for the record
                notes.append("cublaslt paths: " + ", ".join(f"{lb}={times[f'{peer}:{lb}']:.2f}us"
                                                             for lb in labels))
    row.host_us = host_us.get((m, n, k)) if host_us else None
    if row.host_us is None:
        forced = cand if dispatch_variant else None
        row.host_us = host_overhead_us(lambda: fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale,
                                                              out_dtype=args.out_dtype, config=forced))
    row.notes = "; ".join(notes)
    return row


def require_gpu(tool: str) -> None:
    """Exit with one line (no traceback) unless CUDA sees an SM90 GPU."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no GPU")
        from fp8gemm.hw import require_sm90

        require_sm90(cupy.cuda.runtime.getDevice())
    except Exception as exc:
        raise SystemExit(f"{tool} needs an SM90 GPU: {exc}")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.iters < 5:
        raise SystemExit("fp8gemm-bench: --iters must be at least 5")
    if args.moe and args.timer != "cupti":
        raise SystemExit("fp8gemm-bench: --timer graph is wired for the GEMM trace only; --moe times by CUPTI")
    if args.warm_workers is not None and args.warm_workers < 0:
        raise SystemExit("fp8gemm-bench: --warm-workers must be 0 (no warm-up) or more")
    if args.plot and args.moe:
        raise SystemExit("fp8gemm-bench: --plot draws the GEMM trace's speedups; --moe writes no plot (drop --plot)")
    if args.plot:
        try:
            import matplotlib  # noqa: F401 - found missing now, not after the run
        except ImportError as exc:
            raise SystemExit(f"fp8gemm-bench: --plot needs matplotlib ({exc}): pip install matplotlib "
                             f"(the bench extra brings it)") from exc
    shapes = resolve_shapes(args)
    require_gpu("fp8gemm-bench")
    if args.moe:
        return run_moe(args, argv)
    from fp8gemm.dispatch import variants

    if args.variant and args.variant not in variants():
        raise SystemExit(f"fp8gemm-bench: unknown variant {args.variant!r}; known: {', '.join(variants())}")
    peers = []
    for peer in args.peers:
        why = available(peer)
        if why:
            print(f"peer {peer} skipped: {why}", file=sys.stderr)
        else:
            peers.append(peer)

    from .timing import L2Flush

    t0 = time.time()
    warm_report, crashed = warm_deepgemm(
        [{"kind": "deepgemm_gemm", "m": m, "n": n, "k": k} for m, n, k in sorted(shapes, key=lambda s: (s[1], s[2], s[0]))]
        if "deepgemm" in peers and args.out_dtype == "bfloat16" else [], args.warm_workers)
    crashed = {"deepgemm": {(j["m"], j["n"], j["k"]): why for j, why in crashed}}
    host_us = host_phase(shapes, args)
    floor = host_floor(args.out_dtype)
    print(f"host: fast path {floor['fast_path_us']:.1f} us per call, floor (allocate + launch) "
          f"{floor['floor_us']:.1f} us (M=64 N=K=4096)", file=sys.stderr)
    flush = L2Flush()
    ceilings = measure_ceilings(flush, max(args.iters // 2, 5))
    bw, peak = ceilings["copy_bandwidth_bytes_per_s"], ceilings["fp8_dense_peak_flops"]
    print(f"ceilings (measured now): copy {bw / 1e12:.2f} TB/s, FP8 dense {peak / 1e12:.0f} TFLOP/s",
          file=sys.stderr)
    rows = []
    bar = Progress(len(shapes))
    for i, (m, n, k) in enumerate(shapes):
        bar.update(i, f"M={m} N={n} K={k}")
        rows.append(report.fill_derived(bench_shape(m, n, k, args, flush, peers, args.variant, host_us, crashed),
                                        bw, peak))
    bar.update(len(shapes), "done")

    print(report.format_table(rows))
    summary = report.summarize(rows)
    print()
    print(report.format_summary(summary))
    hosts = sorted(r.host_us for r in rows if r.host_us is not None)
    if hosts:
        print(f"  host_us (CuPy caller, eager, before any profiler): median {hosts[len(hosts) // 2]:.1f} us")
    print(f"  host: fast path {floor['fast_path_us']:.1f} us per eager call at M=64 N=K=4096, of which "
          f"{floor['floor_us']:.1f} us is the output allocation + launch alone")
    print(f"\n{len(rows)} shapes in {time.time() - t0:.0f} s; timing: L2-cold (256 MiB read flush), "
          + (f"CUDA-graph replay ([flush, call] x {GRAPH_REPS} minus the flushes), median of {args.iters} replays"
             if args.timer == "graph" else f"CUPTI device time, median of {args.iters}"))
    print(f"each contender is called in its own preferred layout, made outside the timing (fp8gemm: {args.a_scale} "
          "A scales; DeepGEMM: MN-major A scales; cuBLASLt: M-major A scales, B scales padded to 4 K blocks)")
    meta = {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["fp8gemm-bench"] + list(argv if argv is not None else sys.argv[1:])),
            "timing": {"method": GRAPH_METHOD if args.timer == "graph" else CUPTI_METHOD, "iters": args.iters,
                       "statistic": "median"},
            "peers": peers, "ceilings": ceilings, "out_dtype": args.out_dtype, "host_floor": floor,
            "a_scale_layout": args.a_scale, "batch_invariant": args.batch_invariant, **provenance(),
            "environment": environment()}
    if warm_report:
        meta["peer_warm"] = warm_report
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        report.write_csv(rows, args.csv)
        report.write_json(meta, rows, args.json or args.csv.with_suffix(".json"))
    elif args.json:
        report.write_json(meta, rows, args.json)
    if args.plot:
        report.plot(rows, args.plot, report.plot_title(meta["environment"].get("gpu"), args.timer))
    return 0


def run_moe(args, argv) -> int:
    """--moe: the MoE layer table (moe.py) instead of the GEMM trace."""
    import cupy

    from . import moe
    from .peers import grouped_job_bytes
    from .timing import L2Flush
    from .warm import default_workers, job_key

    t0 = time.time()
    dg_why = available("deepgemm") if "deepgemm" in args.peers else "deepgemm not asked for (--peers)"
    dg_note = None if dg_why is None else f"deepgemm not timed: {dg_why}"
    jobs = moe.warm_jobs(args.moe_models, args.moe_tokens, args.moe_routings, args.seed) if dg_note is None else []
    workers = args.warm_workers
    if jobs and workers is None:      # each worker holds one model's weights: fit them all on the GPU
        free = cupy.cuda.runtime.memGetInfo()[0]
        workers = max(1, min(default_workers(), int(0.8 * free) // max(map(grouped_job_bytes, jobs))))
    warm_report, crashed = warm_deepgemm(jobs, workers)
    crashed = {job_key(job): why for job, why in crashed}
    flush = L2Flush()
    ceilings = measure_ceilings(flush, max(args.iters // 2, 5))
    bw, peak = ceilings["copy_bandwidth_bytes_per_s"], ceilings["fp8_dense_peak_flops"]
    print(f"ceilings (measured now): copy {bw / 1e12:.2f} TB/s, FP8 dense {peak / 1e12:.0f} TFLOP/s",
          file=sys.stderr)
    total = len(args.moe_models) * len(args.moe_routings) * len(args.moe_tokens)
    bar, done = Progress(total), [0]

    def progress(label):
        bar.update(done[0], label)
        done[0] += 1

    rows = []
    for name in args.moe_models:
        rows += moe.run_model(name, moe.MODELS[name], args.moe_tokens, args.moe_routings, flush, bw, peak,
                              args.iters, args.seed, progress, dg_note, crashed, batch_invariant=args.batch_invariant)
        cupy.get_default_memory_pool().free_all_blocks()      # the model's weights
    bar.update(total, "done")
    print(moe.format_table(rows))
    summary = moe.summarize(rows)
    print()
    print(moe.format_summary(summary))
    print(f"\n{len(rows)} rows in {time.time() - t0:.0f} s; timing: L2-cold (256 MiB read flush), "
          f"CUPTI device time, median of {args.iters}")
    if dg_note is None:
        print("DeepGEMM's grouped GEMMs run in their own layouts (contiguous: each expert's rows padded to 128 with "
              "m_indices; masked: [experts, max_m] rows), copied outside the timing")
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        moe.write_csv(rows, args.csv)
        meta = {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "command": " ".join(["fp8gemm-bench"] + list(argv if argv is not None else sys.argv[1:])),
                "timing": {"method": CUPTI_METHOD, "iters": args.iters, "statistic": "median"},
                "ceilings": ceilings, "batch_invariant": args.batch_invariant, "summary": summary, **provenance(),
                "environment": environment()}
        if warm_report:
            meta["peer_warm"] = warm_report
        import json
        (args.json or args.csv.with_suffix(".json")).write_text(json.dumps(meta, indent=1) + "\n")
    return 1 if summary["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
