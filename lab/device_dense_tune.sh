#!/usr/bin/env bash
# One device call (issue 55): the dense kernel's GPU tests (both As layouts) in xdist workers,
# lab/dense_ab.py (M-major against K-major As against DeepGEMM, one process), then fp8gemm-tune
# over $TUNE_ARGS with the dense candidates, its table and state into $OUT (resumable: pass the
# state back with STATE=path). Carry .peers (DeepGEMM builds in the background meanwhile).
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache} XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
if [ -z "$NO_AB" ]; then
  ( . .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "built rc=$?" >> "$OUT/deepgemm_build.log" ) &
  build=$!
fi
if [ -z "$NO_TESTS" ]; then
  timeout ${TEST_S:-200} python3 -m pytest -q -n 8 ${TESTS:-tests/test_matmul_dense.py tests/test_dense_dispatch.py} \
    -p no:cacheprovider > "$OUT/tests.log" 2>&1
  echo "tests rc=$?"; tail -2 "$OUT/tests.log"; grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head -10
fi
if [ -z "$NO_AB" ]; then
  wait $build; tail -1 "$OUT/deepgemm_build.log"
  ( . .peers/deepgemm/build.sh > /dev/null 2>&1
    timeout ${AB_S:-150} python3 lab/dense_ab.py "$OUT/dense_ab.json" ${ITERS:-20} 2>&1 | grep -v Warn > "$OUT/dense_ab.log" )
  cat "$OUT/dense_ab.log" | tail -30
fi
if [ -n "$TUNE_ARGS" ]; then
  [ -n "$STATE" ] && cp "$STATE" "$OUT/tune.state.json"
  tag=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oiE "H[0-9]{3}" | tr A-Z a-z)
  timeout ${TUNE_S:-280} python3 -m fp8gemm.bench.tune --out "$OUT/$tag.json" --state "$OUT/tune.state.json" \
    --warm-workers 14 $TUNE_ARGS > "$OUT/tune.log" 2>&1
  echo "tune rc=$?"; tail -12 "$OUT/tune.log"
fi
python3 -m fp8gemm.bench.provenance . 2>/dev/null | grep -E "source_hash"
