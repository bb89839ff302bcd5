#!/usr/bin/env bash
# One device call that checks a session's work: GPU test suite, host overhead, quantizer speed,
# compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over tools/sanitize.py; with TUNE=1
# a short fp8gemm-tune run, with
# FUZZ=<seconds> a tools/fuzz.py run; NO_SUITE=1 / NO_SANITIZERS=1 skip those steps.
# Each step writes its log under $OUT (they come back even if the call is cut short).
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache} XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ -z "$NO_SUITE" ]; then
timeout 330 bash tools/device_run.sh "$@" > "$OUT/suite.log" 2>&1; tail -4 "$OUT/suite.log"
echo "== host overhead"; timeout 60 python3 tools/host_profile.py > "$OUT/host.log" 2>&1; head -16 "$OUT/host.log"
echo "== quantizer"; timeout 60 python3 tools/quant_bench.py > "$OUT/quant.log" 2>&1; tail -3 "$OUT/quant.log"
else
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
fi
[ -n "$NO_SANITIZERS" ] || for tool in memcheck racecheck synccheck initcheck; do
  echo "== $tool"
  timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 python3 tools/sanitize.py > "$OUT/$tool.log" 2>&1
  echo "rc=$?"; grep -E "^(ok|BAD)|ERROR SUMMARY|RACECHECK SUMMARY|Error" "$OUT/$tool.log" | tail -9
done
if [ -n "$FUZZ" ]; then        # FUZZ=<seconds> [SEED=n]: tools/fuzz.py within that budget
  echo "== fuzz"; timeout $((FUZZ + 60)) python3 tools/fuzz.py --cases 100000 --seed ${SEED:-1} \
    --budget-seconds "$FUZZ" > "$OUT/fuzz.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/fuzz.log"
fi
[ -z "$TUNE" ] && exit 0
echo "== tune"
timeout 80 fp8gemm-tune --m 128,2048 --n 4096,7168 --k 4096 --budget-minutes 1 --iters 5 \
  --out "$OUT/h200_tuned.json" > "$OUT/tune.log" 2>&1; echo "rc=$?"; tail -c 600 "$OUT/tune.log"
