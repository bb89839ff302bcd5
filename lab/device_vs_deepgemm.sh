#!/usr/bin/env bash
# One device call: our general kernel against DeepGEMM with DeepGEMM's tiles forced on ours
# (lab/vs_deepgemm.py): the CUPTI times in turns, then ncu (speed of light, memory, warp states,
# PC sampling) of both on the two small-tile shapes, lab/pc_stalls.py's summary and the raw
# metrics of every profiled kernel. Needs .peers/deepgemm in the call's carry. Logs under $OUT.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=$PWD
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/dg_build.log" 2>&1; tail -1 "$OUT/dg_build.log"
(cd /tmp && timeout 200 python3 "$R/lab/vs_deepgemm.py" time "$OUT/time.json" > "$OUT/time.log" 2>&1); echo "time rc=$?"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
NCU_PY=$(ls -d /usr/local/cuda/nsight-compute-*/extras/python /opt/nvidia/nsight-compute/*/extras/python 2>/dev/null | head -1)
(cd /tmp && timeout 240 "$NCU" --clock-control none --kernel-name regex:"sm90_fp8" \
   --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SourceCounters \
   --section LaunchStats --metrics sm__cycles_elapsed.avg.per_second,smsp__inst_executed.sum,dram__bytes_read.sum,lts__t_bytes.sum \
   -f -o "$OUT/vs" python3 "$R/lab/vs_deepgemm.py" run > "$OUT/ncu.log" 2>&1); echo "ncu rc=$?"; tail -2 "$OUT/ncu.log"
"$NCU" -i "$OUT/vs.ncu-rep" --page raw --csv > "$OUT/raw.csv" 2>/dev/null
PYTHONPATH=$NCU_PY python3 lab/pc_stalls.py "$OUT/vs.ncu-rep" "$OUT/pcs" > "$OUT/pcs.txt" 2>&1
python3 - "$OUT/raw.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
if len(rows) < 3: sys.exit("no raw metrics")
head = rows[0]
want = ["Kernel Name", "gpu__time_duration.sum", "sm__cycles_elapsed.avg.per_second", "smsp__inst_executed.sum",
        "dram__bytes_read.sum", "lts__t_bytes.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed", "smsp__warps_issue_stalled_long_scoreboard_per_warp_active.pct",
        "smsp__warps_issue_stalled_barrier_per_warp_active.pct", "smsp__issue_active.avg.pct_of_peak_sustained_active"]
idx = [head.index(w) for w in want if w in head]
for r in rows[2:]:
    print(" | ".join(r[i][:40] for i in idx))
PY
echo "== time"; cat "$OUT/time.log" | tail -30
echo "== stalls"; head -60 "$OUT/pcs.txt"
