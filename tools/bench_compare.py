"""Compare two `fp8gemm-bench` CSVs (e.g. a branch's run against main's, or against the committed
bench/results/h200.csv): geomean of old / new time over the shapes both hold, per kernel variant
of the new run; the shapes slower than cuBLASLt in each (peer times from the same run as ours);
the rows that changed most both ways. Times are CUPTI medians; runs from different calls differ
by ~1% at large shapes and up to ~5% at 2-5 us shapes (bench/NOTES.md), so compare the peers'
own geomean (printed) before trusting a small ratio.
Usage: python tools/bench_compare.py NEW.csv OLD.csv [--top 8]"""
import csv
import math
import sys


def load(path):
    with open(path) as f:
        return {(int(r["M"]), int(r["N"]), int(r["K"])): r for r in csv.DictReader(f)}


def num(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main():
    new, old = load(sys.argv[1]), load(sys.argv[2])
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 8
    common = [k for k in new if k in old and num(new[k]["ours_us"]) and num(old[k]["ours_us"])]
    ratio = {k: num(old[k]["ours_us"]) / num(new[k]["ours_us"]) for k in common}
    print(f"{len(common)} shapes in both: geomean old/new {geomean(list(ratio.values())):.4f}")
    for variant in sorted({new[k]["variant"] for k in common}):
        part = [ratio[k] for k in common if new[k]["variant"] == variant]
        print(f"  {variant:26} {len(part):4} rows  old/new {geomean(part):.4f}")
    peer = [num(old[k]["cublaslt_us"]) / num(new[k]["cublaslt_us"]) for k in common
            if num(new[k]["cublaslt_us"]) and num(old[k]["cublaslt_us"])]
    print(f"  cuBLASLt's own times, old/new: {geomean(peer):.4f} (run-to-run drift between the two calls)")
    for label, rows in (("new", new), ("old", old)):
        slower = sorted((num(r["cublaslt_us"]) / num(r["ours_us"]), k, r["variant"]) for k, r in rows.items()
                        if num(r["cublaslt_us"]) and num(r["ours_us"]) and num(r["cublaslt_us"]) < num(r["ours_us"]))
        print(f"slower than cuBLASLt in {label}: {len(slower)}")
        for r, k, v in slower:
            print(f"  {'x'.join(map(str, k)):>16} {r:.3f} {v}")
    ranked = sorted(common, key=lambda k: ratio[k])
    print("most slowed (old/new < 1):")
    for k in ranked[:top]:
        print(f"  {'x'.join(map(str, k)):>16} {ratio[k]:.3f} {new[k]['variant']} {old[k]['ours_us']} -> {new[k]['ours_us']} us")
    print("most sped up:")
    for k in ranked[::-1][:top]:
        print(f"  {'x'.join(map(str, k)):>16} {ratio[k]:.3f} {new[k]['variant']} {old[k]['ours_us']} -> {new[k]['ours_us']} us")


if __name__ == "__main__":
    main()
