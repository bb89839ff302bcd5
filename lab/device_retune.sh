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
python3 lab/ab_pair.py "$OUT/b_old.csv" "$OUT/b_new.csv" old new
python3 -m fp8gemm.bench.provenance | grep -E "source_hash"
