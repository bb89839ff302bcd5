#!/usr/bin/env bash
# One device call (issue 55): the clock a large FP8 GEMM runs at, ours / DeepGEMM / cuBLASLt
# per-tensor (lab/clock_bound.py). Needs DeepGEMM built first (. .peers/deepgemm/build.sh).
# Writes $W/clock_time.json, $W/clock_ncu.csv, $W/clock_ncu.log; prints a table last.
W=${W:-${OUT:-/tmp/out}}; mkdir -p "$W"
timeout ${CLOCK_TIME_S:-120} python3 lab/clock_bound.py time "$W/clock_time.json" ${CLOCK_ITERS:-20} > "$W/clock_time.log" 2>&1
echo "clock time rc=$?"; cat "$W/clock_time.log" | grep -E "TFLOP/s" | cut -c1-120
# the tensor pipe's busy share where this ncu has such a counter (names differ between versions)
TP=$(ncu --query-metrics 2>/dev/null | grep -oE "^sm__pipe_tensor_op_gmma_cycles_active\b|^sm__inst_executed_pipe_tensor_op_gmma\b" | head -1)
MET="gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__cycles_elapsed.max,sm__cycles_active.avg"
[ -n "$TP" ] && MET="$MET,$TP.avg.pct_of_peak_sustained_elapsed"
echo "ncu metrics: $MET"
timeout ${CLOCK_NCU_S:-150} ncu --clock-control none --kernel-name regex:'gemm|Gemm|GEMM|sm90' --metrics "$MET" --csv \
  python3 lab/clock_bound.py ncu ${CLOCK_CALLS:-3} > "$W/clock_ncu.csv" 2> "$W/clock_ncu.log"
echo "clock ncu rc=$?"; tail -3 "$W/clock_ncu.log" | cut -c1-200
python3 - "$W/clock_ncu.csv" <<'PY'
import csv, sys, collections
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
if not rows:
    print("no ncu rows"); sys.exit()
r = list(csv.DictReader(rows))
by = collections.defaultdict(lambda: collections.defaultdict(list))
for x in r:
    try:
        v = float(x["Metric Value"].replace(",", ""))
    except ValueError:
        continue
    by[(x["Kernel Name"][:60], x["Grid Size"])][x["Metric Name"] + " " + x["Metric Unit"]].append(v)
for (kname, grid), mets in by.items():
    print(kname, grid)
    for name, vs in sorted(mets.items()):
        print(f"   {name:70s} " + " ".join(f"{v:.4g}" for v in vs))
PY
