#!/usr/bin/env bash
# One device call: the MoE layer's split-K note (tests/test_moe_gpu.py with the new split case,
# the bench's layer comparison on the rows that split), then lab/stamps.py with the producer's
# stamps (6, 7) on its default shapes, ours against DeepGEMM. Carry .peers/deepgemm.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
( . .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1 ) &
build=$!
timeout ${TEST_S:-200} python3 -m pytest -q tests/test_moe_gpu.py tests/test_bench_peers.py -p no:cacheprovider \
  > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; tail -3 "$OUT/tests.log"
wait $build; tail -1 "$OUT/deepgemm_build.log"
. .peers/deepgemm/build.sh > /dev/null 2>&1         # the exports (LD_PRELOAD, paths) in this shell
timeout 200 python3 lab/stamps.py "$OUT/stamps.json" > "$OUT/stamps.log" 2>&1; echo "stamps rc=$?"
timeout 150 fp8gemm-bench --moe --moe-models flash,pro --moe-routings skewed --moe-tokens 1,8,16,64,128 --iters 5 \
  --csv "$OUT/moe_skewed.csv" > "$OUT/moe.log" 2>&1; echo "moe rc=$?"
grep -E "differ|WRONG" "$OUT/moe.log" | cut -c1-240 | head -20
cat "$OUT/stamps.log" | tail -25
