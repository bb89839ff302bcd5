#!/usr/bin/env bash
# One device call (issue 55): the dense mainloop's GPU tests (tests/test_matmul_dense.py), then
# lab/dense_ab.py (Dense configs against DeepGEMM and the dispatcher's pick, one process).
# Carry .peers/deepgemm. DeepGEMM builds in the background while the tests run.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
( . .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "built rc=$?" >> "$OUT/deepgemm_build.log" ) &
build=$!
timeout ${TEST_S:-300} python3 -m pytest -q -x ${TESTS:-tests/test_matmul_dense.py} -p no:cacheprovider > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; tail -3 "$OUT/tests.log"; grep -m5 -E "^E |Error" "$OUT/tests.log"
wait $build; tail -2 "$OUT/deepgemm_build.log"
. .peers/deepgemm/build.sh > /dev/null 2>&1     # the environment (PYTHONPATH, LD_PRELOAD) in this shell
timeout ${AB_S:-240} python3 lab/dense_ab.py "$OUT/dense_ab.json" ${ITERS:-20} 2>&1 | tee "$OUT/dense_ab.log"
python3 -m fp8gemm.bench.provenance 2>/dev/null | grep -E "source_hash"
