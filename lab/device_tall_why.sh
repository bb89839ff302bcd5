#!/usr/bin/env bash
# One device call: the 256-row tiles against wg3 and DeepGEMM (lab/tall_variants.py, with its
# patches, each in its own process, against wg3 in the same process), then ncu source counters and
# warp states of tall (3 stages) and wg3 at 8192 x 8192 x 4096 (lab/pc_stalls.py's summary).
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
if [ -n "$DG" ]; then . .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"; fi
if [ -n "$TESTS" ]; then
  timeout 200 python3 -m pytest -q -x tests/test_matmul_tall.py > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -2 "$OUT/tests.log"
fi
for p in ${PATCHES:-none loads none}; do
  PATCH=$p timeout 150 python3 lab/tall_variants.py "$OUT/var_$p.json" 2>&1 | grep -v Warn | grep -v warn_once | tee -a "$OUT/variants.log"
done
if [ -n "$SUITE" ]; then
  timeout ${SUITE_S:-320} python3 -m pytest -q tests --ignore=tests/test_kernels_compile.py -p no:cacheprovider \
    > "$OUT/suite.log" 2>&1; echo "suite rc=$?"; tail -4 "$OUT/suite.log"
fi
[ -n "$NO_NCU" ] && exit 0
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
NCU_PY=$(ls -d /usr/local/cuda/nsight-compute-*/extras/python 2>/dev/null | head -1)
timeout 240 "$NCU" --section SourceCounters --section WarpStateStats --section SpeedOfLight \
  --kernel-name regex:"sm90_fp8_gemm_(tall|wg3)" --launch-skip 1 --launch-count 2 -f -o "$OUT/why" \
  python3 lab/run_configs.py 8192x8192x4096:sm90_fp8_gemm_tall:block_n=128,stages=3 \
  8192x8192x4096:sm90_fp8_gemm_wg3:block_n=128,stages=3 > "$OUT/ncu.log" 2>&1
echo "ncu rc=$?"; tail -2 "$OUT/ncu.log"
PYTHONPATH=$NCU_PY python3 lab/pc_stalls.py "$OUT/why.ncu-rep" "$OUT/why" 2>&1 | head -90
