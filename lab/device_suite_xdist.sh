#!/usr/bin/env bash
# The GPU test suite in one device call: pytest-xdist workers (the device image has it) share the
# one GPU, so NVRTC's first compiles run side by side (serially the suite no longer fits a call).
# CuPy's disk cache writes through a temporary file and a rename, so workers may share it.
# N workers (default 8); the log and the failures go to $OUT/suite.log.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache} XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
nvidia-smi --query-gpu=name --format=csv,noheader
timeout ${SUITE_S:-540} python3 -m pytest tests -q -rs -p no:cacheprovider -n ${N:-8} \
  --ignore=tests/test_kernels_compile.py $PYTEST_ARGS > "$OUT/suite.log" 2>&1
echo "suite rc=$?"
grep -E "^FAILED|^ERROR" "$OUT/suite.log" | head -30
tail -3 "$OUT/suite.log"
python3 -m fp8gemm.bench.provenance . 2>/dev/null | grep -E "source_hash|host_code"
