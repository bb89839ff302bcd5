#!/usr/bin/env bash
# One device call (issue 27): the scheduler's unit decode without 32-bit runtime divisions
# (scheduler.cuh div_by_runtime; the first raster group and one-block groups take none) against
# the tree before it (tools/old_tree.sh REV .old; carry .old and .peers/deepgemm), on every third
# trace shape of M <= 448 (lab/shapes_div.csv: raster groups short of kGroupM m-blocks), each tree
# in its own process with DeepGEMM.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
here=$PWD
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build_div.log" 2>&1; tail -1 "$OUT/deepgemm_build_div.log"
for t in old new; do
  if [ $t = old ]; then pp=$here/.old; else pp=; fi
  (cd /tmp && PYTHONPATH=$pp${PYTHONPATH:+:$PYTHONPATH} timeout ${EACH_S:-150} python3 -m fp8gemm.bench.cli \
    --shapes "$here/lab/shapes_div.csv" --peers deepgemm --iters ${ITERS:-15} --warm-workers 12 \
    --csv "$OUT/div_$t.csv" > "$OUT/div_$t.log" 2>&1; echo "$t rc=$?")
  grep -m3 -iE "error|assert|mismatch" "$OUT/div_$t.log"
done
python3 lab/ab_pair.py "$OUT/div_old.csv" "$OUT/div_new.csv" old new | tail -${TAIL:-70}
