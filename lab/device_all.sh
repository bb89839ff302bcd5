#!/usr/bin/env bash
# One device call when starts are scarce (session 38): the K-major probe, then the GPU suite and the
# four sanitizers side by side (the window switched on where the probe runs clean) while DeepGEMM
# builds, then lab/dense_ab.py and lab/grouped_dense_ab.py on subsets. Carry .peers.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache} PATH=$PATH:/usr/local/cuda/bin
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/fp8gemm-results
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
( . .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "built rc=$?" >> "$OUT/deepgemm_build.log" ) &
build=$!
for v in plain mmajor; do timeout 90 python3 lab/kmajor_probe.py $v 2>&1 | grep -v Warn | tail -1 | tee -a /tmp/probe.txt; done
grep -q "^plain    ok" /tmp/probe.txt && export FP8GEMM_DENSE_K_MAJOR=1
echo "FP8GEMM_DENSE_K_MAJOR=${FP8GEMM_DENSE_K_MAJOR:-0}"
( timeout ${SAN_S:-260} python3 tools/sanitize_all.py /tmp/fp8gemm-results/sanitize --timeout $(( ${SAN_S:-260} - 20 )) \
    > /tmp/fp8gemm-results/sanitize_all.txt 2>&1; echo "sanitize rc=$?" >> /tmp/fp8gemm-results/sanitize_all.txt ) &
san=$!
DEEPGEMM_DIR=/nonexistent timeout ${SUITE_S:-260} bash tools/h200_results.sh suite 2>&1 | tail -3
wait $san
tail -8 /tmp/fp8gemm-results/sanitize_all.txt
tail -3 /tmp/fp8gemm-results/*_suite_full.log
grep -E "^FAILED|^ERROR" /tmp/fp8gemm-results/*_suite_full.log | head -20
tar czf "$OUT/results.tgz" -C /tmp fp8gemm-results
python3 -m fp8gemm.bench.provenance . 2>/dev/null | grep -E "source_hash"
wait $build; tail -1 "$OUT/deepgemm_build.log"
if [ -n "$FP8GEMM_DENSE_K_MAJOR" ]; then
  . .peers/deepgemm/build.sh > /dev/null 2>&1
  export PYTHONPATH=$PWD:$PYTHONPATH
  DENSE_AB_CASES=${DENSE_AB_CASES:-0,2} timeout ${AB_S:-100} python3 lab/dense_ab.py "$OUT/dense_ab.json" ${ITERS:-15} 2>&1 \
    | grep -v Warn | tee "$OUT/dense_ab.log" | tail -12
  GAB_CONFIGS=${GAB_CONFIGS:-0,2} GAB_LAYERS=${GAB_LAYERS:-0,1} timeout ${GAB_S:-130} python3 lab/grouped_dense_ab.py \
    "$OUT/grouped_dense_ab.json" ${ITERS:-10} ${TOKENS:-4096,8192} 2>&1 | grep -v Warn | tee "$OUT/grouped_dense_ab.log" | tail -16
fi
