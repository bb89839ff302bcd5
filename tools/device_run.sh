#!/usr/bin/env bash
# One device call: install from the checkout, smoke-check, run the full test suite, keep logs.
# Usage (on the device): bash tools/device_run.sh [pytest args...]
set -o pipefail
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache} XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
python3 tools/smoke.py 2>&1 | tee "$OUT/smoke.log"
python3 -m pytest tests -q -p no:cacheprovider "$@" 2>&1 | tee "$OUT/pytest.log" | tail -40
