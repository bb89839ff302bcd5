#!/usr/bin/env bash
# One device call: lab/k_sweep.py (fixed cost and cost per K block, ours against DeepGEMM) and the
# tall kernel's dense variants (lab/tall_variants.py, committed form). Carry .peers/deepgemm.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"
DENSE_ONLY=1 timeout 120 python3 lab/tall_variants.py "$OUT/var.json" > "$OUT/var.log" 2>&1; echo "variants rc=$?"
timeout 300 python3 lab/k_sweep.py "$OUT/k_sweep.json" > "$OUT/k_sweep.log" 2>&1; echo "k_sweep rc=$?"
grep -E "^none " "$OUT/var.log"; tail -20 "$OUT/k_sweep.log"
