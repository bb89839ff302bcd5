#!/usr/bin/env bash
# One device call (issue 27): the chunked K loop with its loads pinned (volatile asm) against the
# rolled loops, on the shipped table (same tiles and rings: lab/shapes_chunk2.csv, the shapes whose
# shipped ring takes a chunk), DeepGEMM in each process; then ncu of 48 x 4096 x 1024 on 64 x 32
# s16, chunked off and on (sections and per-instruction stalls). Carry .peers/deepgemm.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; tail -1 "$OUT/deepgemm_build.log"
timeout 100 python3 -m pytest -q tests/test_matmul_general.py -k "chunked" -p no:cacheprovider > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; tail -1 "$OUT/tests.log"
. lab/ab_knob.sh; ab_knob CHUNK lab/shapes_chunk2.csv ${ITERS:-9}
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
NCU_PY=$(ls -d /usr/local/cuda/nsight-compute-*/extras/python 2>/dev/null | head -1)
CALLS=2 timeout 120 "$NCU" --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
  --section SourceCounters --section InstructionStats --kernel-name regex:"sm90_fp8_gemm_general" \
  -f -o "$OUT/chunk" python3 lab/chunk_ncu.py 48 4096 1024 64 32 16 > "$OUT/ncu.log" 2>&1; echo "ncu rc=$?"
"$NCU" --import "$OUT/chunk.ncu-rep" --page details --csv > "$OUT/chunk_details.csv" 2>/dev/null
PYTHONPATH=$NCU_PY python3 lab/pc_stalls.py "$OUT/chunk.ncu-rep" "$OUT/stalls" > "$OUT/stalls.txt" 2>&1
python3 - "$OUT/chunk_details.csv" <<'PY'
import csv, sys
keep = ("Duration", "SM Active Cycles", "Warp Cycles Per Issued Instruction", "Issue Slots Busy",
        "Executed Ipc Active", "Executed Instructions", "No Eligible", "Registers Per Thread")
for r in csv.DictReader(open(sys.argv[1])):
    if r["Metric Name"] in keep:
        print(f'{r["ID"]:>3} {r["Kernel Name"][-40:]:40} {r["Metric Name"]:36} {r["Metric Value"]:>12} {r["Metric Unit"]}')
PY
cut -c1-150 "$OUT/stalls.txt" | head -70
python3 -m fp8gemm.bench.provenance | grep -E "source_hash"
