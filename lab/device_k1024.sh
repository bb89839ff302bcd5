#!/usr/bin/env bash
# One device call (issue 27): the dispatcher's tests on the GPU, the K = 1024 trace shapes against
# DeepGEMM (fp8gemm-bench, the scale loads back on short units), then ncu of ours and DeepGEMM at
# NCU_SHAPE with the same tile (M N K block_m block_n stages; default 48 x 4096 x 1024 on 64 x 32
# s16, DeepGEMM's pick too): the sections and the per-instruction stalls (lab/pc_stalls.py).
# Carry .peers/deepgemm.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"
timeout 200 python3 -m pytest -q tests/test_dispatch.py tests/test_matmul_general.py -p no:cacheprovider \
  > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -2 "$OUT/tests.log"
timeout 200 python3 -m fp8gemm.bench.cli --m ${K1024_M:-48,64,128,158,256,512,1024} --n 512,4096,8192 --k 1024 \
  --peers deepgemm --csv "$OUT/k1024.csv" > "$OUT/k1024.log" 2>&1; echo "bench rc=$?"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
NCU_PY=$(ls -d /usr/local/cuda/nsight-compute-*/extras/python 2>/dev/null | head -1)
CALLS=3 timeout 150 "$NCU" --section SpeedOfLight --section WarpStateStats --section LaunchStats \
  --section SchedulerStats --section SourceCounters --section MemoryWorkloadAnalysis \
  --kernel-name regex:"sm90_fp8_gemm_(general|1d2d)" --launch-skip 2 --launch-count 2 -f -o "$OUT/k1024" \
  python3 lab/feed_ncu.py ${NCU_SHAPE:-48 4096 1024 64 32 16} > "$OUT/ncu.log" 2>&1; echo "ncu rc=$?"
"$NCU" --import "$OUT/k1024.ncu-rep" --page details --csv > "$OUT/k1024_details.csv" 2>/dev/null
PYTHONPATH=$NCU_PY python3 lab/pc_stalls.py "$OUT/k1024.ncu-rep" "$OUT/stalls" > "$OUT/stalls.txt" 2>&1
python3 - "$OUT/k1024_details.csv" "$OUT/k1024.csv" <<'PY'
import csv, sys
keep = ("Duration", "Elapsed Cycles", "SM Active Cycles", "DRAM Throughput", "L2 Cache Throughput",
        "Grid Size", "Registers Per Thread", "Warp Cycles Per Issued Instruction", "Issue Slots Busy",
        "Executed Ipc Active", "No Eligible", "L1/TEX Hit Rate", "L2 Hit Rate")
for r in csv.DictReader(open(sys.argv[1])):
    if r["Metric Name"] in keep:
        print(f'{r["ID"]:>3} {r["Kernel Name"][:24]:24} {r["Metric Name"]:36} {r["Metric Value"]:>12} {r["Metric Unit"]}')
rows = list(csv.DictReader(open(sys.argv[2])))
print(f"{'M':>5} {'N':>5} {'variant':22} {'ours':>7} {'DG':>7} {'DG/ours':>8}")
for r in rows:
    dg = float(r["deepgemm_us"]) if r["deepgemm_us"] else float("nan")
    print(f"{r['M']:>5} {r['N']:>5} {r['variant'][13:]:22} {float(r['ours_us']):7.2f} {dg:7.2f} {dg / float(r['ours_us']):8.3f}")
PY
python3 -m fp8gemm.bench.provenance | grep -E "source_hash"
