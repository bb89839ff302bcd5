#!/usr/bin/env bash
# One device call: the scale-warps knob and the tall kernel's one-loop knob on the GPU.
# 1. their GPU tests (tests/test_matmul_tall.py, tests/test_matmul_general.py -k scale_warps);
# 2. lab/scale_warps.py: the trace's mid-M shapes, scale warps on / off, DeepGEMM beside;
# 3. lab/tall_variants.py dense, committed form and PATCH=both (wg3 / tall slots / loads / one loop).
# Step 2 ran lab/scale_warps.py, removed with the knob it measured (bench/NOTES.md); the script is kept as run.
# Carry .peers/deepgemm (DeepGEMM is built first).
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"
timeout 200 python3 -m pytest -q -x tests/test_matmul_tall.py > "$OUT/test_tall.log" 2>&1; echo "tall tests rc=$?"; tail -2 "$OUT/test_tall.log"
timeout 150 python3 -m pytest -q -x tests/test_matmul_general.py -k scale_warps > "$OUT/test_sw.log" 2>&1; echo "scale_warps tests rc=$?"; tail -2 "$OUT/test_sw.log"
ITERS=${ITERS:-15} timeout 200 python3 lab/scale_warps.py "$OUT/scale_warps.json" > "$OUT/scale_warps.log" 2>&1; echo "scale_warps rc=$?"
for p in none both; do
  DENSE_ONLY=1 PATCH=$p timeout 100 python3 lab/tall_variants.py "$OUT/var_$p.json" > "$OUT/var_$p.log" 2>&1; echo "variants $p rc=$?"
done
for p in none both; do grep -E "^(none|both) " "$OUT/var_$p.log"; done
cat "$OUT/scale_warps.log" | tail -40
