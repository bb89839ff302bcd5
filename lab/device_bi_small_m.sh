#!/usr/bin/env bash
# One device call (issue 57): the batch-invariant mode's small-M tiles (FP8GEMM_BATCH_INVARIANT_SMALL_M=1,
# dispatch/invariant.py: mode_candidate): the bitwise GPU tests with them on, then the mode's cost
# with them off and on (fp8gemm-bench --quick --batch-invariant, same machine). If the tests pass on
# the H100 and the H200, the switch can default to on.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
FP8GEMM_BATCH_INVARIANT_SMALL_M=1 timeout ${TEST_S:-240} python3 -m pytest -q -rxX -p no:cacheprovider -n 8 \
  tests/test_batch_invariant.py tests/test_batch_invariant_grouped.py > "$OUT/bi_tests.log" 2>&1
echo "tests rc=$?"; grep -E "passed|failed|XPASS|XFAIL|differ" "$OUT/bi_tests.log" | cut -c1-160 | tail -16
for on in 0 1; do
  echo "== small-M tiles $on"
  FP8GEMM_BATCH_INVARIANT_SMALL_M=$on timeout ${BENCH_S:-90} fp8gemm-bench --quick --batch-invariant --peers none \
    --iters 10 --warm-workers 0 2>&1 | grep -E "vs default" | tee -a "$OUT/bi_cost.txt"
done
