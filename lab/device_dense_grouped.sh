#!/usr/bin/env bash
# One device call (issues 55, 29): with the dense kernel's K-major window on, lab/dense_ab.py (plain
# Dense on both As layouts against DeepGEMM) and lab/grouped_dense_ab.py (the grouped dense mode
# against our default grouped tile and DeepGEMM's contiguous grouped GEMM). Carry .peers.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache} FP8GEMM_DENSE_K_MAJOR=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"; tail -2 "$OUT/deepgemm_build.log"
[ -z "$NO_PLAIN" ] && timeout ${AB_S:-200} python3 lab/dense_ab.py "$OUT/dense_ab.json" ${ITERS:-15} 2>&1 | grep -v Warn | tee "$OUT/dense_ab.log" | tail -40
timeout ${GAB_S:-300} python3 lab/grouped_dense_ab.py "$OUT/grouped_dense_ab.json" ${ITERS:-10} ${TOKENS:-1024,4096,8192} 2>&1 | grep -v Warn | tee "$OUT/grouped_dense_ab.log" | tail -60
python3 -m fp8gemm.bench.provenance . 2>/dev/null | grep -E "source_hash"
