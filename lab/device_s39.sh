#!/usr/bin/env bash
# One device call (session 39, issue 55): (1) the K-major As window ring (windows of 8 and of 4 K
# blocks, one process each) against M-major As and DeepGEMM (lab/dense_ab.py, DENSE_AB_CASES);
# (2) the dense kernel's GPU tests. Carry .peers.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache} PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"; tail -2 "$OUT/deepgemm_build.log"
timeout ${T_S:-150} python3 -m pytest -q -x -p no:cacheprovider -n 8 tests/test_matmul_dense.py tests/test_grouped_gpu.py \
  > "$OUT/dense_tests.log" 2>&1; echo "dense tests rc=$?"; tail -3 "$OUT/dense_tests.log" | cut -c1-200
for w in ${WINDOWS:-8}; do
  echo "== window $w"
  FP8GEMM_DENSE_SFA_WINDOW=$w DENSE_AB_CASES=${CASES:-0,2,3} timeout ${AB_S:-120} python3 lab/dense_ab.py "$OUT/dense_ab_w$w.json" ${ITERS:-15} \
    2>&1 | grep -v Warn | tee "$OUT/dense_ab_w$w.log" | tail -14
done
# The ncu part of this call failed (a NameError in lab/grouped_dense_l2.py, since fixed) and ran
# again in lab/device_s39b.sh.
python3 -m fp8gemm.bench.provenance . 2>/dev/null | grep -E "source_hash"
