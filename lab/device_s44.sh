#!/usr/bin/env bash
# One device call (session 44, issue 55): the flat K-major As (packed rows of K / 128 <= 8 blocks,
# kSfaFlat) on the trace's 88 K = 256 shapes. Retune those shapes over a copy of this GPU's table
# (the dense kernel is a candidate there now), then time them with the retuned table against
# DeepGEMM, cuBLASLt and Triton in the same process. Carry .peers.
#   TUNE_S, TRACE_S: each part's time limit (0 skips it); PEERS: the bench's peers
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
python3 -m fp8gemm.bench.provenance . 2>/dev/null | grep -E "source_hash"
tag=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oiE "H[0-9]{3}" | tr A-Z a-z)
awk -F, 'NR == 1 || $3 == 256' fp8gemm/deepseek_v4_flash.csv > /tmp/k256.csv
cp "dispatch/$tag.json" "$OUT/$tag.json"
if [ "${TUNE_S:-200}" != 0 ]; then
  timeout ${TUNE_S:-200} python3 -m fp8gemm.bench.tune --shapes /tmp/k256.csv --out "$OUT/$tag.json" --state "$OUT/tune.state.json" \
    --update --budget-minutes $(awk "BEGIN{print ${TUNE_S:-200} * 0.6 / 60}") --warm-workers 12 > "$OUT/tune.log" 2>&1
  echo "tune rc=$?"; tail -2 "$OUT/tune.log" | cut -c1-200
  python3 - "$OUT/$tag.json" <<'PY'
import json, sys, collections
t = json.load(open(sys.argv[1]))
c = collections.Counter(e.get("variant", "?") for e in t["entries"] if e.get("k") == 256)
print("K = 256 entries by variant:", dict(c))
PY
fi
export FP8GEMM_TABLE="$OUT/$tag.json"
if [ "${TRACE_S:-250}" != 0 ]; then
  . .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"; tail -1 "$OUT/deepgemm_build.log"
  timeout ${TRACE_S:-250} python3 -m fp8gemm.bench --shapes /tmp/k256.csv --peers ${PEERS:-deepgemm,cublaslt,triton} --iters 10 \
    --csv "$OUT/k256.csv" > "$OUT/k256.log" 2>&1; echo "k256 trace rc=$?"; grep -A6 "^Summary" "$OUT/k256.log" | cut -c1-200
fi
