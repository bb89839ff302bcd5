#!/usr/bin/env bash
# One device call (issue 27): retune the table's shapes with K >= 1024 and 24 <= M <= 1024
# (lab/shapes_retune.csv) with the chunk-fitting rings among the candidates (dispatch/general.py:
# chunk_ring), then time those shapes with the old and the new table, each table in its own
# process with DeepGEMM beside it (ratios time / DeepGEMM's compare across the two).
# Carry .peers/deepgemm. Returns the new table as $OUT/h200.json.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
cp dispatch/h200.json "$OUT/h200_old.json"
# DeepGEMM builds on the CPUs while the tuner compiles and times (sourced again below: then quick)
bash -c ". .peers/deepgemm/build.sh" > "$OUT/deepgemm_build.log" 2>&1 &
dg=$!
timeout ${TUNE_S:-300} python3 -m fp8gemm.bench.tune --shapes lab/shapes_retune.csv --update \
  --out dispatch/h200.json --state "$OUT/tune_state.json" --iters ${ITERS:-25} --warm-workers 10 \
  > "$OUT/tune.log" 2>&1
echo "tune rc=$?"; tail -5 "$OUT/tune.log"
cp dispatch/h200.json "$OUT/h200.json"
wait $dg; . .peers/deepgemm/build.sh >> "$OUT/deepgemm_build.log" 2>&1; tail -1 "$OUT/deepgemm_build.log"
for t in old new; do
  table=$OUT/h200_old.json; [ $t = new ] && table=dispatch/h200.json
  FP8GEMM_TABLE=$table timeout ${EACH_S:-110} python3 -m fp8gemm.bench.cli --shapes lab/shapes_retune.csv \
    --peers deepgemm --iters 15 --warm-workers 12 --csv "$OUT/b_$t.csv" > "$OUT/b_$t.log" 2>&1
  echo "$t rc=$?"; grep -m3 -iE "error|assert|mismatch" "$OUT/b_$t.log"
done
python3 - "$OUT" <<'PY'
import csv, math, sys
out = sys.argv[1]
runs = {t: {(r["M"], r["N"], r["K"]): r for r in csv.DictReader(open(f"{out}/b_{t}.csv"))} for t in ("old", "new")}
print(f"{'M':>5} {'N':>5} {'K':>5}{'DG us':>8}{'old':>8}{'new':>8}{'new/old':>8}  variant (time / DeepGEMM's, same process)")
lr, lo, ln = [], [], []
for key, r in runs["new"].items():
    o = runs["old"].get(key)
    if o is None or not r["deepgemm_us"] or not o["deepgemm_us"]:
        continue
    qn = float(r["ours_us"]) / float(r["deepgemm_us"]); qo = float(o["ours_us"]) / float(o["deepgemm_us"])
    lr.append(math.log(qn / qo)); lo.append(math.log(qo)); ln.append(math.log(qn))
    if abs(qn / qo - 1) > 0.02:
        print(f"{key[0]:>5} {key[1]:>5} {key[2]:>5}{float(r['deepgemm_us']):8.2f}{qo:8.3f}{qn:8.3f}{qn / qo:8.3f}  {r['variant']}")
g = lambda v: math.exp(sum(v) / len(v))
print(f"{len(lr)} shapes (rows above: changed by more than 2%): geomean new/old {g(lr):.3f}; "
      f"time / DeepGEMM old {g(lo):.3f}, new {g(ln):.3f}")
PY
python3 -m fp8gemm.bench.provenance | grep -E "source_hash"
