#!/usr/bin/env bash
# One device call: the GPU suite on the checkout, then ncu of the TMA feed alone (ours PATCH=feed,
# DeepGEMM's 1D2D header without its wgmma, as lab/device_feed.sh) at one shape of the same tile and
# ring (FEED_SHAPE: M N K block_m block_n stages). Carry .peers/deepgemm.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
timeout ${SUITE_S:-380} python3 -m pytest -q tests --ignore=tests/test_kernels_compile.py -p no:cacheprovider \
  > "$OUT/suite.log" 2>&1; echo "suite rc=$?"; tail -4 "$OUT/suite.log"
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"
rm -rf /tmp/dgfeed && mkdir -p /tmp/dgfeed && cp -r /tmp/deepgemm/DeepGEMM /tmp/dgfeed/
sed -i 's/WGMMA::wgmma(a_desc, b_desc, accum, k);/(void)k;/' /tmp/dgfeed/DeepGEMM/deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
PYTHONPATH=/tmp/dgfeed/DeepGEMM DG_JIT_CACHE_DIR=/tmp/dgfeed/jit PATCH=feed python3 lab/feed_ncu.py ${FEED_SHAPE:-128 4096 8192 64 64 9}
PYTHONPATH=/tmp/dgfeed/DeepGEMM DG_JIT_CACHE_DIR=/tmp/dgfeed/jit PATCH=feed timeout 150 "$NCU" \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats \
  --kernel-name regex:"sm90_fp8_gemm_(general|1d2d)" --launch-skip 2 --launch-count 2 -f -o "$OUT/feed" \
  python3 lab/feed_ncu.py ${FEED_SHAPE:-128 4096 8192 64 64 9} > "$OUT/ncu.log" 2>&1; echo "ncu rc=$?"
"$NCU" --import "$OUT/feed.ncu-rep" --page details --csv > "$OUT/feed_details.csv" 2>/dev/null
python3 - "$OUT/feed_details.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
keep = ("Duration", "DRAM Throughput", "L2 Cache Throughput", "L1/TEX Cache Throughput", "Memory Throughput",
        "L2 Hit Rate", "Mem Busy", "Max Bandwidth", "L2 Compression", "Grid Size", "Registers Per Thread",
        "Block Size", "Warp Cycles Per Issued Instruction", "Avg. Active Threads Per Warp", "Elapsed Cycles",
        "SM Active Cycles", "Mem Pipes Busy")
names = sorted({r["Kernel Name"][:40] for r in rows})
for r in rows:
    if r["Metric Name"] in keep:
        print(f'{r["ID"]:>3} {r["Kernel Name"][:28]:28} {r["Metric Name"]:36} {r["Metric Value"]:>12} {r["Metric Unit"]}')
PY
