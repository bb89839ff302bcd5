#!/usr/bin/env bash
export PYTHONUNBUFFERED=1 PYTHONPATH=. CUPY_CACHE_DIR=/tmp/cupy_cache
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
V=L1_fp32,L1_fp32_skip,fused,fused_epilogue_never
timeout 200 python3 tools/exp_swiglu.py --rounds 6 --only $V 8192 > $OUT/time.log 2>&1; grep "T=" $OUT/time.log
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_op_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__cycles_active.avg
timeout 240 ncu --clock-control none --kernel-name regex:sm90_fp8_gemm_general --launch-skip 4 --launch-count 4 --metrics $M --csv python3 tools/exp_swiglu.py --profile --only $V 8192 > $OUT/ncu.csv 2>&1; echo "ncu rc=$?"
grep "profiled launch" $OUT/ncu.csv
python3 - $OUT/ncu.csv <<'PY'
import csv, sys
lines = open(sys.argv[1]).read().splitlines()
start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
for r in csv.DictReader(lines[start:]):
    print(r["ID"], r["Metric Name"], r["Metric Unit"], r["Metric Value"])
PY
