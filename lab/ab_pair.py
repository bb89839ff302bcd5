"""Lab: two fp8gemm-bench CSVs of the same shapes, each timed in its own process with DeepGEMM,
compared as (ours / DeepGEMM's) of the second over the first, per shape and geomean.
Usage: python lab/ab_pair.py A.csv B.csv [LABEL_A LABEL_B]"""
import csv
import math
import sys


def main(path_a, path_b, la="a", lb="b"):
    runs = [{(r["M"], r["N"], r["K"]): r for r in csv.DictReader(open(p))} for p in (path_a, path_b)]
    print(f"{'M':>5} {'N':>5} {'K':>5}{'DG us':>8}{la:>8}{lb:>8}{lb + '/' + la:>10}   (time / DeepGEMM's, same process)")
    logs, log_a, log_b = [], [], []
    for key, r in runs[1].items():
        o = runs[0].get(key)
        if o is None or not r["deepgemm_us"] or not o["deepgemm_us"]:
            continue
        qb = float(r["ours_us"]) / float(r["deepgemm_us"])
        qa = float(o["ours_us"]) / float(o["deepgemm_us"])
        logs.append(math.log(qb / qa)); log_a.append(math.log(qa)); log_b.append(math.log(qb))
        print(f"{key[0]:>5} {key[1]:>5} {key[2]:>5}{float(r['deepgemm_us']):8.2f}{qa:8.3f}{qb:8.3f}{qb / qa:10.3f}")
    gm = lambda v: math.exp(sum(v) / len(v))
    print(f"geomean {lb}/{la} {gm(logs):.3f} over {len(logs)} shapes; time / DeepGEMM's {la} {gm(log_a):.3f}, "
          f"{lb} {gm(log_b):.3f}")


if __name__ == "__main__":
    main(*sys.argv[1:])
