#!/usr/bin/env bash
# One device call for general-kernel experiments (issue 4). Environment:
#   EXPS=a,b,c   tools/exp_general.py variants to time (default: base,no_promote)
#   NCU=name     ncu stall sampling of that variant at 4096^3 ("base": the committed kernel)
#   TESTS=1      the GPU test suite afterwards
export PYTHONUNBUFFERED=1 PYTHONPATH=. CUPY_CACHE_DIR=/tmp/cupy_cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 300 python3 tools/exp_general.py --only "${EXPS:-base,no_promote}" 2>&1 | tee "$OUT/exp.log" | tail -5
if [ -n "$NCU" ]; then
  timeout 120 ncu --clock-control none --kernel-name regex:general --launch-skip 2 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight -f -o "$OUT/$NCU" \
    python3 tools/profile_target.py 4096 4096 4096 4 --exp "$NCU" > "$OUT/ncu.log" 2>&1
  ncu -i "$OUT/$NCU.ncu-rep" --page source --csv --print-source sass > "$OUT/${NCU}_sass.csv" 2>&1
  ncu -i "$OUT/$NCU.ncu-rep" --page details 2>&1 | grep -E "Duration|Warp Cycles Per Issued|Tensor"
fi
if [ -n "$TESTS" ]; then timeout 240 python3 -m pytest tests -q -x -p no:cacheprovider 2>&1 | tail -2; fi
