#!/usr/bin/env bash
# One device call for the grouped GEMM (issue 8): install, its GPU tests, its timing on
# DeepSeek-V4 expert shapes (lab/grouped_bench.py), then the pytest files named in $ALSO.
# Logs under $OUT.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache} XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 -m pip install -q --no-deps --no-build-isolation . 2>&1 | tail -3
echo "== grouped tests"
timeout ${TEST_S:-220} python3 -m pytest -q -p no:cacheprovider tests/test_grouped_gpu.py tests/test_validate_grouped.py \
  > "$OUT/grouped_tests.log" 2>&1; echo "rc=$?"; grep -E "passed|failed|Error|assert" "$OUT/grouped_tests.log" | tail -25
echo "== grouped bench"
timeout ${BENCH_S:-160} python3 lab/grouped_bench.py --iters 5 ${BENCH_ARGS} --csv "$OUT/grouped.csv" \
  > "$OUT/gbench.log" 2>&1; echo "rc=$?"; tail -22 "$OUT/gbench.log"
if [ -n "$ALSO" ]; then
  echo "== $ALSO"; timeout ${ALSO_S:-180} python3 -m pytest -q -p no:cacheprovider $ALSO > "$OUT/also.log" 2>&1
  echo "rc=$?"; tail -5 "$OUT/also.log"
fi
if [ -n "$PLAIN" ]; then       # PLAIN="--m ... --n ... --k ...": fp8gemm-bench on those shapes
  echo "== fp8gemm-bench $PLAIN"; timeout ${PLAIN_S:-120} fp8gemm-bench $PLAIN --peers cublaslt --csv "$OUT/plain.csv" \
    > "$OUT/plain.log" 2>&1; echo "rc=$?"; grep -vE "^\s*$" "$OUT/plain.log" | tail -30
fi
