#!/usr/bin/env bash
# One device call (issue 58): the four compute-sanitizer tools over tools/sanitize.py's cases
# (tools/sanitize_all.py), then the split-K race tests and the dense kernel's NaN-border tests.
# Logs as one archive under $OUT (the device returns at most 8 files).
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
export PATH=$PATH:/usr/local/cuda/bin
timeout ${SAN_S:-380} python3 tools/sanitize_all.py /tmp/sanitize --timeout $(( ${SAN_S:-380} - 20 )) 2>&1 | tail -12
echo "sanitize rc=${PIPESTATUS[0]}"
tar czf "$OUT/sanitize_logs.tgz" -C /tmp sanitize 2>/dev/null
timeout ${TEST_S:-150} python3 -m pytest -q tests/test_race_gpu.py tests/test_matmul_dense.py -k "race or poisoned or refused or swap or staging" \
  -p no:cacheprovider > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; tail -2 "$OUT/tests.log"; grep -m5 -E "^E |^FAILED" "$OUT/tests.log"
python3 -m fp8gemm.bench.provenance 2>/dev/null | grep -E "source_hash"
