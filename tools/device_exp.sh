#!/usr/bin/env bash
# Experiment call: GPU tests of the general kernel, exp_general timings, ncu of the committed kernel.
export PYTHONUNBUFFERED=1 PYTHONPATH=. CUPY_CACHE_DIR=/tmp/cupy_cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"

timeout 240 python3 tools/exp_general.py --only base,rolled,old_loop,no_promote 2>&1 | tee $OUT/exp.log | tail -5
timeout 120 ncu --clock-control none --kernel-name regex:general --launch-skip 2 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight -f -o $OUT/lean python3 tools/profile_target.py 4096 4096 4096 4 > $OUT/ncu.log 2>&1
ncu -i $OUT/lean.ncu-rep --page source --csv --print-source sass > $OUT/lean_sass.csv 2>&1
ncu -i $OUT/lean.ncu-rep --page details 2>&1 | grep -E "Duration|Warp Cycles Per Issued|Tensor"
timeout 200 python3 -m pytest tests -q -x -p no:cacheprovider 2>&1 | tail -2
