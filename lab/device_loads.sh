#!/usr/bin/env bash
# One device call (issue 27): the K loop with each block's scale loads in its own half and the lean
# barrier forms on every tile (as committed) against the loop before (PATCH=oldlean,oldloads) and
# the loads change alone (PATCH=oldlean), each in its own process with DeepGEMM beside it
# (lab/bench_patched.py: fp8gemm-bench on SHAPES_ARGS), then the GPU suite in what is left of
# DEADLINE seconds. Carry .peers/deepgemm.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"
TAGS=${TAGS:-"none oldlean,oldloads oldlean"}
ARGS=${SHAPES_ARGS:-"--shapes lab/shapes_loads.csv"}
for t in $TAGS; do
  PATCH=$t timeout ${EACH_S:-110} python3 lab/bench_patched.py $ARGS --peers deepgemm --iters ${ITERS:-9} \
    --warm-workers 12 --csv "$OUT/b_${t/,/_}.csv" > "$OUT/b_${t/,/_}.log" 2>&1
  echo "$t rc=$?"; grep -m3 -iE "error|assert|mismatch" "$OUT/b_${t/,/_}.log"
done
python3 - "$OUT" $TAGS <<'PY'
import csv, math, os, sys
out, tags = sys.argv[1], sys.argv[2:]
runs = {}
for t in tags:
    p = f"{out}/b_{t.replace(',', '_')}.csv"
    if os.path.exists(p):
        runs[t] = {(r["M"], r["N"], r["K"]): r for r in csv.DictReader(open(p))}
print("time / DeepGEMM's time in the same process (below 1: ours faster); us of the first run")
first = next(iter(runs.values()))
print(f"{'M':>5} {'N':>5} {'K':>5} {'variant':16}{'us':>8}{'DG us':>8}" + "".join(f"{t:>20}" for t in runs))
logs = {t: [] for t in runs}
for key, r in first.items():
    cells = []
    for t, rr in runs.items():
        x = rr.get(key)
        if x and x["deepgemm_us"]:
            q = float(x["ours_us"]) / float(x["deepgemm_us"]); logs[t].append(math.log(q)); cells.append(f"{q:20.3f}")
        else:
            cells.append(f"{'-':>20}")
    dg = r["deepgemm_us"] or "nan"
    print(f"{key[0]:>5} {key[1]:>5} {key[2]:>5} {r['variant'][13:]:16}{float(r['ours_us']):8.2f}{float(dg):8.2f}" + "".join(cells))
print("geomean" + " " * 43 + "".join(f"{math.exp(sum(v) / len(v)):20.3f}" for v in logs.values() if v))
PY
if [ -z "$NO_SUITE" ]; then
  left=$(( ${DEADLINE:-585} - SECONDS )); echo "suite: ${left} s left"
  timeout $left python3 -m pytest -q tests --ignore=tests/test_kernels_compile.py -p no:cacheprovider \
    > "$OUT/suite.log" 2>&1; echo "suite rc=$?"; tail -2 "$OUT/suite.log"; grep -E "^(FAILED|ERROR)" "$OUT/suite.log" | head -20
fi
python3 -m fp8gemm.bench.provenance | grep -E "source_hash"
