#!/usr/bin/env bash
# One device call: DeepGEMM built, then lab/sustained.py on the large shapes (speed, SM clock and
# power of each contender under sustained load, then the bench's L2-cold turns).
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=$PWD
. .peers/deepgemm/build.sh > "$OUT/dg_build.log" 2>&1
tail -1 "$OUT/dg_build.log"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
cd /tmp && python3 "$R/lab/sustained.py" "$OUT/sustained.json" ${SHAPES:-8192x8192x4096 16384x8192x4096 4096x4096x4096 2048x7168x2048} 2>&1 | grep -v Warn
