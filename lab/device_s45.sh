#!/usr/bin/env bash
# One device call (session 45, issue 29): fp8gemm-bench --moe with DeepGEMM's grouped GEMMs in the
# same run, the default grouped tiles against the dense grouped mode (FP8GEMM_GROUPED_DENSE=1), prefill
# token counts, both models, uniform and skewed routing. Carry .peers.
#   MOE_TOKENS (default 512,1024,2048,4096,8192), MOE_S: each run's limit, ITERS
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
python3 -m fp8gemm.bench.provenance . 2>/dev/null | grep -E "source_hash"
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"; tail -1 "$OUT/deepgemm_build.log"
for v in ${MOE_VARIANTS:-0 1}; do
  FP8GEMM_GROUPED_DENSE=$v timeout ${MOE_S:-200} python3 -m fp8gemm.bench --moe --moe-tokens ${MOE_TOKENS:-512,1024,2048,4096,8192} \
    --iters ${ITERS:-10} --csv "$OUT/moe_grouped_dense$v.csv" > "$OUT/moe_grouped_dense$v.log" 2>&1
  echo "moe FP8GEMM_GROUPED_DENSE=$v rc=$?"; grep -A9 "^MoE layer summary" "$OUT/moe_grouped_dense$v.log" | cut -c1-220
done
