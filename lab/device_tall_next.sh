#!/usr/bin/env bash
# One device call for the 256-row tiles' per-FLOP gap (bench/NOTES.md: their next calls):
# 1. lab/tall_variants.py, dense only, committed form and PATCH=both, each process with wg3 and
#    Tall's knobs side by side (slots / loads, one loop / two loops);
# 2. ncu, locked clocks, source counters and warp states of tall s3, tall s3 one-loop and wg3 at
#    8192 x 8192 x 4096, summarized by lab/pc_stalls.py (ncu_report found under the ncu install).
# DG=1 builds DeepGEMM first (carry .peers/deepgemm) and adds its fp8_gemm_nt to step 1.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
if [ -n "$DG" ]; then . .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"; fi
for p in none both; do
  DENSE_ONLY=1 PATCH=$p timeout 120 python3 lab/tall_variants.py "$OUT/var_$p.json" 2>&1 | grep -E "^(none|both) "
done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
NCU_PY=$(dirname "$(find / -name ncu_report.py -path '*extras/python*' 2>/dev/null | head -1)")
echo "ncu: $NCU, report module: $NCU_PY"
T=sm90_fp8_gemm_tall
timeout 240 "$NCU" --section SourceCounters --section WarpStateStats --section SpeedOfLight \
  --kernel-name regex:"sm90_fp8_gemm_(tall|wg3)" --launch-skip 1 --launch-count 5 -f -o "$OUT/tall" \
  python3 lab/run_configs.py 8192x8192x4096:$T:block_n=128,stages=3 8192x8192x4096:$T:block_n=128,stages=3,one_loop=1 \
  8192x8192x4096:sm90_fp8_gemm_wg3:block_n=128,stages=3 > "$OUT/ncu.log" 2>&1
echo "ncu rc=$?"; tail -2 "$OUT/ncu.log"
PYTHONPATH=$NCU_PY python3 lab/pc_stalls.py "$OUT/tall.ncu-rep" "$OUT/tall" 2>&1 | head -120
