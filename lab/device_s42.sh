#!/usr/bin/env bash
# One device call (session 42, issue 55): the GPU suite on the commit, then the dense fallback
# model out of sample (the unseen list) and on the trace without a table, DeepGEMM in the same
# process. Parts in priority order (a call cut short still returns what ran). Carry .peers.
#   TUNE_ON=h200 (or any): first retune that GPU's table (when the call got one; TUNE_S) and run the rest on it
#   TUNE_SHAPES: only these shapes (a CSV of M,N,K; e.g. lab/shapes_partial_tiles.csv: the trace's M > 64 that
#     are not a multiple of 64, where the moved A box changes the tiles' times), the rest of the table kept
#   SUITE_S, UNSEEN_S, BIQ_S, TRACE_S, MODEL_S: each part's time limit (0 skips it; BIQ_S, TRACE_S off by default)
#   TRACE_PEERS: the trace's peers (default all three)
#   BIQ_ENV: the batch-invariant switch BIQ times at 0 and 1 (default FP8GEMM_BATCH_INVARIANT_NEIGHBOUR_PICKS)
#   BI500_S: issue 57's acceptance run, 500 random (M1, M2, N, K) per dtype (FP8GEMM_TEST_RANDOM_PAIRS=500, 30 items
#     of 50 pairs over 14 xdist workers; off by default)
#   BITRACE_S: the mode beside the default and DeepGEMM over the whole trace (--batch-invariant; off by default)
#   ABS_S: the moved A box A/B (lab/a_box_shift_ab.py, FP8GEMM_DENSE_A_BOX_SHIFT; off by default)
#   SWAB_S, SWAB_ENV, SWAB_SHAPES: fp8gemm-bench --shapes SWAB_SHAPES --peers deepgemm with SWAB_ENV=0
#     then =1 (a dense lab switch on the table's picks; off by default)
#   SUITE_FILES: the suite's test files (default: all of tests/)
#   STATE, TABLE_IN: an earlier call's tune.state.json and table (carried) to go on from
#   $OUT gets the table, tune.state.json and logs.tgz (every log, csv and json of the parts)
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache} XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# A call returns at most 8 files from $OUT: every log, csv and json goes to $W, and save() puts the
# table and one archive of $W into $OUT after each part (a call cut short keeps what had run).
W=$(mktemp -d /tmp/w.XXXX); FINAL_OUT=$OUT
save() { [ -s "$W/$tag.json" ] && cp "$W/$tag.json" "$FINAL_OUT/"; [ -s "$W/tune.state.json" ] && cp "$W/tune.state.json" "$FINAL_OUT/"; tar czf "$FINAL_OUT/logs.tgz" -C "$W" . ; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
python3 -m fp8gemm.bench.provenance . 2>/dev/null | grep -E "source_hash"
tag=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oiE "H[0-9]{3}" | tr A-Z a-z)
if [ -n "$TUNE_ON" ] && { [ "$tag" = "$TUNE_ON" ] || [ "$TUNE_ON" = any ]; }; then   # retune this GPU's table first; the suite then runs on it
  # a budget inside the timeout, and --update over the shipped table: a tune cut short still writes a
  # whole table (the shapes it did not reach keep their shipped entries)
  cp "${TABLE_IN:-dispatch/$tag.json}" "$W/$tag.json"
  [ -n "$STATE" ] && cp "$STATE" "$W/tune.state.json"     # go on from an earlier call's tuner state
  timeout ${TUNE_S:-150} python3 -m fp8gemm.bench.tune ${TUNE_SHAPES:+--shapes $TUNE_SHAPES} --out "$W/$tag.json" --state "$W/tune.state.json" --update \
    --budget-minutes $(awk "BEGIN{print ${TUNE_S:-150} * 0.55 / 60}") --warm-workers 12 > "$W/tune.log" 2>&1
  echo "tune rc=$?"; tail -2 "$W/tune.log" | cut -c1-200; grep -o '"stopped": "[^"]*"' "$W/$tag.json"
  [ -s "$W/$tag.json" ] && export FP8GEMM_TABLE="$W/$tag.json"
fi
save
if [ "${SUITE_S:-230}" != 0 ]; then
  # -v: a call cut short still names what failed (xdist prints "[gwN] [ pp%] FAILED tests/...")
  # SUITE_FILES: only these test files (a short call), else the whole suite
  timeout -s INT -k 20 ${SUITE_S:-230} python3 -m pytest ${SUITE_FILES:-tests} -v -rs --durations=40 -p no:cacheprovider -n 8 --ignore=tests/test_kernels_compile.py \
    > "$W/suite.log" 2>&1; echo "suite rc=$?"; grep -E "^\[gw[0-9]+\] \[ *[0-9]+%\] (FAILED|ERROR) |^(FAILED|ERROR) " "$W/suite.log" | cut -c1-200 | head -20
  grep -cE " PASSED " "$W/suite.log"; tail -1 "$W/suite.log" | cut -c1-200
fi
save
if [ "${UNSEEN_S:-200}${TRACE_S:-0}${MODEL_S:-150}${BITRACE_S:-0}${ABS_S:-0}${SWAB_S:-0}" != 000000 ]; then   # DeepGEMM only where a part times it
  . .peers/deepgemm/build.sh > "$W/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"; tail -1 "$W/deepgemm_build.log"
fi
save
if [ "${UNSEEN_S:-200}" != 0 ]; then
  timeout ${UNSEEN_S:-200} python3 -m fp8gemm.bench --unseen --peers deepgemm --iters 10 --csv "$W/unseen.csv" \
    > "$W/unseen.log" 2>&1; echo "unseen rc=$?"; grep -A3 "^Summary" "$W/unseen.log" | cut -c1-200; tail -3 "$W/unseen.log" | cut -c1-160
fi
save
if [ "${BIQ_S:-0}" != 0 ]; then   # issue 57: the mode's cost with a switch of the mode off and on (BIQ_ENV)
  for r in 0 1; do
    env ${BIQ_ENV:-FP8GEMM_BATCH_INVARIANT_NEIGHBOUR_PICKS}=$r timeout $BIQ_S python3 -m fp8gemm.bench --quick --batch-invariant --peers none \
      --iters 10 --csv "$W/bi_quick_sw$r.csv" > "$W/bi_quick_sw$r.log" 2>&1; echo "bi quick ${BIQ_ENV:-NEIGHBOUR_PICKS}=$r rc=$?"
    grep -A1 "batch-invariant mode" "$W/bi_quick_sw$r.log" | tail -1 | cut -c1-200
  done
fi
save
if [ "${ABS_S:-0}" != 0 ]; then   # issue 55: the last row tile's A box past A's rows, then moved up
  timeout $ABS_S python3 lab/a_box_shift_ab.py "$W/a_box_shift.json" 15 > "$W/a_box_shift.log" 2>&1; echo "a box shift rc=$?"
  grep -E "past|moved|deepgemm" "$W/a_box_shift.log" | cut -c1-90 | tail -40
fi
save
if [ "${SWAB_S:-0}" != 0 ]; then   # a dense lab switch off then on, on the table's picks, DeepGEMM in each run
  for r in 0 1; do
    env ${SWAB_ENV:?SWAB_ENV names the switch}=$r timeout $SWAB_S python3 -m fp8gemm.bench --shapes ${SWAB_SHAPES:?} --peers deepgemm \
      --timer cupti --iters 15 --csv "$W/swab_$r.csv" > "$W/swab_$r.log" 2>&1; echo "switch A/B $SWAB_ENV=$r rc=$?"
    grep -A2 "^Summary" "$W/swab_$r.log" | tail -1 | cut -c1-200
  done
fi
save
if [ "${BI500_S:-0}" != 0 ]; then   # issue 57: 500 random M pairs per output dtype, bitwise
  FP8GEMM_TEST_RANDOM_PAIRS=500 timeout $BI500_S python3 -m pytest tests/test_batch_invariant.py -k random_m_pairs -v \
    -p no:cacheprovider -n 14 > "$W/bi500.log" 2>&1; echo "bi 500 pairs rc=$?"; grep -E "PASSED|FAILED" "$W/bi500.log" | cut -c1-160 | tail -4
fi
save
if [ "${BITRACE_S:-0}" != 0 ]; then   # issue 57: the mode's cost over the trace, DeepGEMM in the same run
  timeout $BITRACE_S python3 -m fp8gemm.bench --batch-invariant --peers deepgemm --iters 10 --csv "$W/bi_trace.csv" \
    > "$W/bi_trace.log" 2>&1; echo "bi trace rc=$?"; grep -A4 "batch-invariant mode" "$W/bi_trace.log" | cut -c1-200
fi
save
if [ "${TRACE_S:-0}" != 0 ]; then   # the trace with the table in use (the retuned one where TUNE_ON took)
  timeout $TRACE_S python3 -m fp8gemm.bench --peers ${TRACE_PEERS:-cublaslt,triton,deepgemm} --iters 10 --csv "$W/trace.csv" \
    > "$W/trace.log" 2>&1; echo "trace rc=$?"; grep -A3 "^Summary" "$W/trace.log" | cut -c1-200
fi
save
if [ "${MODEL_S:-150}" != 0 ]; then   # the trace with no table: the fallback model alone
  echo '{"entries": []}' > /tmp/empty_table.json
  FP8GEMM_TABLE=/tmp/empty_table.json timeout ${MODEL_S:-150} python3 -m fp8gemm.bench --peers deepgemm --iters 10 \
    --csv "$W/trace_model.csv" > "$W/trace_model.log" 2>&1; echo "trace, model alone rc=$?"
  grep -A3 "^Summary" "$W/trace_model.log" | cut -c1-200
fi
save
