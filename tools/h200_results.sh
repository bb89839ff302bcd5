#!/usr/bin/env bash
# On an H200: the benchmark results we commit, with every peer (DeepGEMM included), from one tree.
#
#   bash tools/h200_results.sh [gemm] [moe] [suite]      (default: all three, in that order)
# (named for the first GPU it served; the files take the GPU model's prefix, h100 or h200: TAG)
#
# DeepGEMM comes as a source bundle (../shared/peers/deepgemm: copy it into the ignored folder
# .peers/deepgemm, or point DEEPGEMM_DIR at it; on the device machine name that folder in the
# call's carry). Its build.sh builds it offline (about 90 s, once per machine) and sets PYTHONPATH,
# LD_PRELOAD and DG_JIT_CACHE_DIR; the bench then finds it as the peer `deepgemm` and warms its JIT
# cache in parallel before timing. Then fp8gemm is installed from this checkout and:
#   gemm   fp8gemm-bench over the built-in trace    -> h200.csv / .json / .png, h200_stdout.txt
#   moe    fp8gemm-bench --moe                       -> h200_moe.csv / .json, h200_moe_stdout.txt
#   suite  the GPU test suite (not the compile test: nvcc-only, 700 compiles, the developer machine
#          and CI run it)                             -> h200_suite.txt (its log, whose last lines
#          name the same source hash as the JSONs)
# all written to $RESULTS (default /tmp/fp8gemm-results), packed at the end into $OUT/results.tgz
# when $OUT is set (the device machine returns few files: one archive). BENCH_ARGS / MOE_ARGS /
# PYTEST_ARGS add arguments (e.g. BENCH_ARGS=--quick).
set -o pipefail
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache} XLA_PYTHON_CLIENT_PREALLOCATE=false
RESULTS=${RESULTS:-/tmp/fp8gemm-results}
# the files' GPU prefix (h200.csv, h100.csv, ...): the GPU model, from nvidia-smi, unless TAG says
TAG=${TAG:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -oiE "H[0-9]{3}" | tr A-Z a-z)}
TAG=${TAG:-h200}
mkdir -p "$RESULTS"
steps=${*:-gemm moe suite}
dg=${DEEPGEMM_DIR:-.peers/deepgemm}
log() { echo "== $(date -u +%H:%M:%S) $*"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$RESULTS/gpu.txt" 2>&1
if [ -f "$dg/build.sh" ]; then
  log "building DeepGEMM from $dg"
  # sourced in this shell (not in a pipeline's subshell), so that its exports stay
  DG_BUILD_LOG=/tmp/deepgemm-build.log . "$dg/build.sh" > "$RESULTS/deepgemm_build.txt" 2>&1
  tail -3 "$RESULTS/deepgemm_build.txt"; cp /tmp/deepgemm-build.log "$RESULTS/" 2>/dev/null
else
  log "no DeepGEMM bundle at $dg: the deepgemm columns stay empty (the notes say why)"
fi
log "installing fp8gemm from this checkout (editable: python -m pytest imports it from here)"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
python3 -m fp8gemm.bench.provenance | tee "$RESULTS/provenance.json"

for step in $steps; do
  case $step in
  gemm)
    log "GEMM trace"
    python3 -m fp8gemm.bench.cli --csv "$RESULTS/${TAG}.csv" --plot "$RESULTS/${TAG}.png" $BENCH_ARGS \
      > "$RESULTS/${TAG}_stdout.txt" 2> "$RESULTS/${TAG}_stderr.txt"
    echo "rc=$?"; tail -22 "$RESULTS/${TAG}_stdout.txt"; grep -E "warm-up|crashed|Error" "$RESULTS/${TAG}_stderr.txt" | head -12 ;;
  moe)
    log "MoE layer"
    python3 -m fp8gemm.bench.cli --moe --csv "$RESULTS/${TAG}_moe.csv" $MOE_ARGS \
      > "$RESULTS/${TAG}_moe_stdout.txt" 2> "$RESULTS/${TAG}_moe_stderr.txt"
    echo "rc=$?"; tail -14 "$RESULTS/${TAG}_moe_stdout.txt"; grep -E "warm-up|crashed|Error" "$RESULTS/${TAG}_moe_stderr.txt" | head -12 ;;
  suite)
    log "test suite"
    # xdist workers where installed (the device image has it): serially the suite no longer fits a call
    xd=""; python3 -c "import xdist" 2>/dev/null && xd="-n ${PYTEST_WORKERS:-8}"
    python3 -m pytest tests -q -rs -p no:cacheprovider $xd --ignore=tests/test_kernels_compile.py $PYTEST_ARGS \
      > "$RESULTS/${TAG}_suite_full.log" 2>&1
    echo "rc=$?"
    { echo "# fp8gemm GPU test suite, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(head -2 "$RESULTS/gpu.txt" | tail -1)"
      echo "# python3 -m pytest tests -q -rs --ignore=tests/test_kernels_compile.py (tools/h200_results.sh); its whole log:"
      cat "$RESULTS/${TAG}_suite_full.log"; } > "$RESULTS/${TAG}_suite.txt"
    tail -4 "$RESULTS/${TAG}_suite.txt" ;;
  *) echo "unknown step $step (gemm, moe, suite)"; exit 2 ;;
  esac
done
[ -n "$OUT" ] && tar -czf "$OUT/results.tgz" -C "$RESULTS" . && log "packed $OUT/results.tgz"
exit 0
