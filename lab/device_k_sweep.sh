#!/usr/bin/env bash
# One device call: lab/k_sweep.py (fixed cost and cost per K block, ours against DeepGEMM).
# Carry .peers/deepgemm.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"
timeout 300 python3 lab/k_sweep.py "$OUT/k_sweep.json" > "$OUT/k_sweep.log" 2>&1; echo "k_sweep rc=$?"
tail -20 "$OUT/k_sweep.log"
