#!/usr/bin/env bash
# One device call at the end of a session: the GPU test suite (tools/h200_results.sh suite: every
# test but the nvcc compile sweep) and tools/sanitize_all.py (memcheck, racecheck, synccheck,
# initcheck over tools/sanitize.py's cases) side by side on the one GPU; both logs packed into
# $OUT/results.tgz. SUITE_S / SAN_S bound each.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache} PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/fp8gemm-results
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
# PROBE: the dense kernel's K-major As window first, one variant per process; where the window as
# shipped runs clean, the suite and the sanitizers below run with it switched on (its forced tests
# and sanitizer cases included), else without it (a fault would poison an xdist worker).
if [ -n "$PROBE" ]; then
    for v in plain mmajor; do timeout 90 python3 lab/kmajor_probe.py $v 2>&1 | grep -v Warn | tail -1 | tee -a /tmp/probe.txt; done
    grep -q "^plain    ok" /tmp/probe.txt && export FP8GEMM_DENSE_K_MAJOR=1
    echo "FP8GEMM_DENSE_K_MAJOR=${FP8GEMM_DENSE_K_MAJOR:-0}"
fi
( timeout ${SAN_S:-300} python3 tools/sanitize_all.py /tmp/fp8gemm-results/sanitize --timeout $(( ${SAN_S:-300} - 20 )) \
    > /tmp/fp8gemm-results/sanitize_all.txt 2>&1; echo "sanitize rc=$?" >> /tmp/fp8gemm-results/sanitize_all.txt ) &
san=$!
DEEPGEMM_DIR=/nonexistent timeout ${SUITE_S:-480} bash tools/h200_results.sh suite 2>&1 | tail -4
wait $san
cat /tmp/fp8gemm-results/sanitize_all.txt | tail -8
tail -3 /tmp/fp8gemm-results/*_suite_full.log
grep -E "^FAILED|^ERROR" /tmp/fp8gemm-results/*_suite_full.log | head -20
tar czf "$OUT/results.tgz" -C /tmp fp8gemm-results
[ -n "$AB" ] && timeout ${AB_S:-60} python3 lab/dense_2acc.py 15 2>&1 | grep -v Warn | tail -20
python3 -m fp8gemm.bench.provenance . 2>/dev/null | grep -E "source_hash|host_code"
[ -n "$PROBE" ] && cat /tmp/probe.txt
