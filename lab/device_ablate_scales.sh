#!/usr/bin/env bash
# One device call: lab/ablate_scales.py in every mode (one process each, alternating twice; DG=1
# adds DeepGEMM to the first mode, carry .peers/deepgemm then). Prints a table; JSON under $OUT.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/cupy_cache
OUT=${OUT:-/tmp/out}; mkdir -p $OUT; R=$PWD
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
[ "$DG" = 1 ] && { . .peers/deepgemm/build.sh > $OUT/dg_build.log 2>&1; tail -1 $OUT/dg_build.log; }
cd /tmp
for rep in 1 2; do
  for m in none noa nob noscale; do
    DG=$([ $m = none ] && echo "$DG") MODE=$m timeout 100 python3 $R/lab/ablate_scales.py $OUT/${m}_$rep.json > $OUT/$m$rep.txt 2>&1 || { echo "fail $m $rep"; tail -3 $OUT/$m$rep.txt; }
  done
done
python3 - $OUT <<'PY'
import json, os, sys
o = sys.argv[1]
def best(m):
    r = [json.load(open(f"{o}/{m}_{i}.json")) for i in (1, 2) if os.path.exists(f"{o}/{m}_{i}.json")]
    return {k: min(x[k] for x in r if k in x) for k in r[0]} if r else {}
t = {m: best(m) for m in ("none", "noa", "nob", "noscale")}
print(f"{'':40} {'real':>8} {'no As':>8} {'no Bs':>8} {'none':>8}")
for k in t["none"]:
    print(f"{k:40} " + " ".join(f"{t[m].get(k, float('nan')):8.2f}" for m in t))
PY
