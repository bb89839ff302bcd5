"""Lab (issue 55's geomean goals): how far above the best peer can any kernel be, per M band?

From a trace CSV of `fp8gemm-bench --peers cublaslt,triton,deepgemm` (its roofline_us column: the
larger of the fewest bytes over the copy bandwidth and the FLOPs over the FP8 peak, both measured in
that run), each shape's time cannot fall below roofline_us + t0, where t0 is a kernel's fixed part
(launch, first load's latency, last store). The best-peer ratio a kernel at that floor would reach is
best_peer_us / (roofline_us + t0); its geomean per band is the ceiling of the band's goal. t0 is not
known exactly: the table shows it for several values, among them the smallest time any contender
measured on the trace (a kernel that moved almost no data).
  python lab/band_ceiling.py bench/results/h100_session48_trace.csv
"""
import csv
import math
import sys

PEERS = ("cublaslt_us", "triton_us", "deepgemm_us")
BANDS = (("M <= 64", lambda m: m <= 64), ("64 < M < 1024", lambda m: 64 < m < 1024), ("M >= 1024", lambda m: m >= 1024))


def geomean(v):
    return math.exp(sum(math.log(x) for x in v) / len(v))


def main(path):
    rows = []
    for r in csv.DictReader(open(path)):
        peers = [float(r[p]) for p in PEERS if r.get(p)]
        if not peers or not r.get("ours_us") or not r.get("roofline_us"):
            continue
        rows.append((int(r["M"]), float(r["ours_us"]), min(peers), float(r["roofline_us"])))
    t_min = min(min(o, b) for _, o, b, _ in rows)
    print(f"{path}: {len(rows)} shapes; smallest time any contender measured: {t_min:.3f} us")
    t0s = sorted({1.0, 1.5, round(t_min, 3), 2.0})
    print(f"{'band':<14} {'n':>4} {'ours/best':>9} " + " ".join(f"{'ceil t0=' + str(t):>13}" for t in t0s)
          + " " + " ".join(f"{'ours frac t0=' + str(t):>17}" for t in t0s))
    for name, pick in BANDS:
        b = [x for x in rows if pick(x[0])]
        if not b:
            continue
        ours = geomean([best / o for _, o, best, _ in b])
        ceil = [geomean([best / (rf + t) for _, _, best, rf in b]) for t in t0s]
        frac = [geomean([(rf + t) / o for _, o, _, rf in b]) for t in t0s]
        print(f"{name:<14} {len(b):>4} {ours:>9.3f} " + " ".join(f"{c:>13.3f}" for c in ceil)
              + " " + " ".join(f"{f:>17.3f}" for f in frac))


if __name__ == "__main__":
    main(sys.argv[1])
