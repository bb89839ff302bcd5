"""Per-instruction stall samples from an ncu report (issue 4): where each kernel's warps wait.

Profile with the source counters (PC sampling), e.g.
  ncu --section SourceCounters --section WarpStateStats --kernel-name regex:'nvjet|sm90_fp8' \
      -o rep python3 lab/profile_vs_cublaslt.py 4096x4096x4096
then run this with ncu's Python module on the path:
  PYTHONPATH=/usr/local/cuda/nsight-compute-*/extras/python python3 lab/pc_stalls.py rep.ncu-rep OUTDIR
For every profiled kernel it writes OUTDIR/<index>_<name>.csv (pc, sass, samples per stall reason)
and prints the kernel's sample total by reason, then its hottest instructions, then the samples by
opcode (the SASS mnemonic without modifiers)."""
import collections
import csv
import os
import re
import sys

import ncu_report

PREFIX = "smsp__pcsamp_warps_issue_stalled_"
TOTAL = "smsp__pcsamp_sample_count"


def per_pc(action, name):
    """{pc: value} of an instanced metric keyed by PC, or {} where the report lacks it."""
    m = action.metric_by_name(name)
    if m is None or m.num_instances() == 0:
        return {}
    ids = m.correlation_ids()
    return {ids.as_uint64(i): m.as_uint64(i) for i in range(m.num_instances())}


def opcode(sass):
    s = re.sub(r"^@!?U?P\w+\s+", "", sass.strip())
    return s.split(" ")[0].split(".")[0] if s else "?"


def main():
    rep, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    ctx = ncu_report.load_report(rep)
    idx = 0
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for a in range(rng.num_actions()):
            act = rng.action_by_idx(a)
            name = act.name()
            reasons = sorted(n for n in act.metric_names() if n.startswith(PREFIX) and not n.endswith("_not_issued"))
            table = {n[len(PREFIX):]: per_pc(act, n) for n in reasons}
            table = {k: v for k, v in table.items() if v}
            total = per_pc(act, TOTAL)
            pcs = sorted(set(total) | {pc for v in table.values() for pc in v})
            dur = act.metric_by_name("gpu__time_duration.sum")
            print(f"\n=== [{idx}] {name[:90]}  {dur.as_double() / 1e3 if dur else float('nan'):.2f} us, "
                  f"{len(pcs)} sampled PCs, {sum(total.values())} samples")
            if not pcs:
                print("  no per-PC samples; metrics:", [n for n in act.metric_names() if "pcsamp" in n][:20])
                idx += 1
                continue
            cols = sorted(table, key=lambda k: -sum(table[k].values()))
            path = os.path.join(outdir, f"{idx}_{re.sub(r'[^A-Za-z0-9_]', '_', name)[:60]}.csv")
            rows = []
            for pc in pcs:
                sass = act.sass_by_pc(pc)
                rows.append([hex(pc), sass, total.get(pc, 0)] + [table[c].get(pc, 0) for c in cols])
            with open(path, "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["pc", "sass", "samples"] + cols)
                w.writerows(rows)
            grand = sum(total.values()) or 1
            print("  by reason:", ", ".join(f"{c} {100 * sum(table[c].values()) / grand:.1f}%" for c in cols[:12]))
            print("  hottest instructions (% of samples, top reasons):")
            for row in sorted(rows, key=lambda x: -x[2])[:28]:
                top = sorted(((row[3 + i], c) for i, c in enumerate(cols)), reverse=True)[:3]
                why = " ".join(f"{c}={v}" for v, c in top if v)
                print(f"  {row[0]:>8} {100 * row[2] / grand:5.1f}%  {row[1][:60]:60}  {why}")
            ops = collections.Counter()
            for row in rows:
                ops[opcode(row[1])] += row[2]
            print("  by opcode:", ", ".join(f"{o} {100 * v / grand:.1f}%" for o, v in ops.most_common(14)))
            idx += 1


if __name__ == "__main__":
    main()
