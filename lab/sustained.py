"""Lab: each contender's speed under sustained load, with the SM clock and the board power it runs at.

For each shape, every contender (ours as dispatched, ours on forced configurations, DeepGEMM when
it imports) runs back to back for SECONDS, twice, in alternation (A B A B), timed with CUDA events
over the whole window (no flush: a compute-bound shape's operands are mostly streamed anyway);
nvidia-smi samples the SM clock and the power every 50 ms in the background, and each window
reports the medians of its samples after its first quarter. Then the same contenders are timed as
the bench does (bench/timing.py: L2 cold, taking turns). Cycles per call = time x clock tells a
contender that does less work apart from one that is only clocked higher.
Usage: python lab/sustained.py OUT.json MxNxK [MxNxK ...]"""
import json
import statistics
import subprocess
import sys
import time
from datetime import datetime

import torch

import fp8gemm
from fp8gemm.bench.peers import Inputs, prepare_deepgemm
from fp8gemm.bench.timing import L2Flush, time_calls
from fp8gemm.dispatch import select
from fp8gemm.dispatch import selector as sel
from fp8gemm.testing import random_case

SECONDS = 1.5
FORCED = [{"variant": "sm90_fp8_gemm_general", "block_n": 128, "stages": 5, "group_m": 8},
          {"variant": "sm90_fp8_gemm_wg3", "block_n": 128, "stages": 3, "group_m": 8}]


def contenders(m, n, k):
    case = random_case(m, n, k, seed=1)
    x = Inputs(case, "bfloat16")
    out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    fns = {}
    for c in [select(m, n, k)] + [sel.from_entry(e) for e in FORCED]:
        label = f"ours {c.label()}"
        if label not in fns:
            fns[label] = lambda c=c: fp8gemm.matmul(x.a, x.b, x.sa, x.sb, out=out, config=c)
    try:
        dg = prepare_deepgemm(x)
        if isinstance(dg, dict):
            fns.update({f"deepgemm {k}": f for k, f in dg.items()})
    except ImportError:
        pass
    return fns


def window(fn):
    """(us per call, host start, host end) of calls back to back for SECONDS."""
    fn()
    torch.cuda.synchronize()
    t0 = time.time()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    calls = 0
    while time.time() - t0 < SECONDS:
        for _ in range(10):
            fn()
        calls += 10
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / calls, t0, time.time()


def samples(log, t0, t1):
    """Median SM clock (MHz) and power (W) of the samples in the last three quarters of [t0, t1]."""
    lo = t0 + (t1 - t0) / 4
    clk, pw = [], []
    for line in open(log):
        parts = [p.strip() for p in line.split(",")]
        try:
            ts = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        except (ValueError, IndexError):
            continue
        if lo <= ts <= t1:
            clk.append(float(parts[1]))
            pw.append(float(parts[2]))
    return (statistics.median(clk) if clk else float("nan"), statistics.median(pw) if pw else float("nan"))


def main(out, shapes):
    log = "/tmp/smi.log"
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "50"], stdout=open(log, "w"))
    flush = L2Flush()
    res = {}
    try:
        for shape in shapes:
            m, n, k = (int(v) for v in shape.split("x"))
            fns = contenders(m, n, k)
            for fn in fns.values():
                fn()
            torch.cuda.synchronize()
            for rnd in range(2):
                for name, fn in fns.items():
                    us, t0, t1 = window(fn)
                    time.sleep(0.3)          # let the last samples land
                    clk, pw = samples(log, t0, t1)
                    res[f"{shape} {name} sustained{rnd}"] = {"us": us, "mhz": clk, "w": pw,
                                                               "tflops": 2 * m * n * k / us / 1e6}
                    print(f"{shape:18} {name:44} r{rnd} {us:9.2f} us {2 * m * n * k / us / 1e6:7.0f} TF "
                          f"{clk:6.0f} MHz {pw:5.0f} W  {us * clk:10.0f} cycles", flush=True)
            t = time_calls(fns, flush, 20)
            for name, us in t.items():
                res[f"{shape} {name} bench"] = {"us": us, "tflops": 2 * m * n * k / us / 1e6}
                print(f"{shape:18} {name:44} bench {us:9.2f} us {2 * m * n * k / us / 1e6:7.0f} TF", flush=True)
    finally:
        smi.terminate()
    with open(out, "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
