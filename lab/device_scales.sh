#!/usr/bin/env bash
# One device call for issue 27's next steps (the scale loads of the general kernel's K loop, and
# the fallback branch), run from a checkout of main with the branches laid out beside it:
#   tools/old_tree.sh wip/fallback-64rows .fb && tools/old_tree.sh wip/first-scales .fs &&
#   tools/old_tree.sh wip/scale-windows .sw        (then name .fb, .fs and .sw in the call's carry)
# 1. ncu source counters of the general kernel on two forced configurations, where the scales
#    cost most and least (bench/NOTES.md, the ablation), and lab/pc_stalls.py's summary of them;
# 2. wip/first-scales (the first unit's scales loaded before the CTA sync) and wip/scale-windows
#    (the plain GEMM reads its scales from shared memory) against this tree on lab/ab_configs.py's
#    forced configurations, alternating, two runs each; the windows branch's GPU tests first;
# 3. the fallback: fp8gemm-bench on (N, K) pairs and M values the table never saw, this tree (its
#    fallback: 128-row / swap-AB) against the branch's (64-row tiles), each in its own process.
# Logs and CSVs go to $OUT.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=$PWD
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
G=sm90_fp8_gemm_general
echo "== ncu"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
NCU_PY=$(ls -d /usr/local/cuda/nsight-compute-*/extras/python 2>/dev/null | head -1)
(cd /tmp && timeout 300 "$NCU" --section SourceCounters --section WarpStateStats --kernel-name regex:"$G" \
   --launch-skip 1 --launch-count 1 -f -o "$OUT/scales" python3 "$R/lab/run_configs.py" \
   "64x4096x4096:$G:block_n=32,stages=16,block_m=64" > "$OUT/ncu1.log" 2>&1
 timeout 300 "$NCU" --section SourceCounters --section WarpStateStats --kernel-name regex:"$G" \
   --launch-skip 1 --launch-count 1 -f -o "$OUT/scales_l" python3 "$R/lab/run_configs.py" \
   "4096x4096x4096:$G:block_n=128,stages=6" > "$OUT/ncu2.log" 2>&1)
echo "rc=$?"; tail -2 "$OUT/ncu1.log" "$OUT/ncu2.log"
for rep in scales scales_l; do
  PYTHONPATH=$NCU_PY python3 lab/pc_stalls.py "$OUT/$rep.ncu-rep" "$OUT/$rep" 2>&1 | head -40 | tee "$OUT/$rep.txt"
done
echo "== the windows branch's general-kernel tests"
(cd $R/.sw && PYTHONPATH=$R/.sw timeout 240 python3 -m pytest -q -p no:cacheprovider -x tests/test_matmul_general.py \
   > "$OUT/sw_tests.log" 2>&1; echo "rc=$?"; tail -2 "$OUT/sw_tests.log")
echo "== A/B: main, first-scales, scale-windows"
(cd /tmp && for i in 1 2; do
   python3 "$R/lab/ab_configs.py" "$OUT/ab_main$i.json" > /dev/null 2>&1
   PYTHONPATH=$R/.fs python3 "$R/lab/ab_configs.py" "$OUT/ab_fs$i.json" > /dev/null 2>&1
   PYTHONPATH=$R/.sw python3 "$R/lab/ab_configs.py" "$OUT/ab_sw$i.json" > /dev/null 2>&1
 done)
python3 - "$OUT" <<'PY'
import json, sys
o = sys.argv[1]
runs = {t: [json.load(open(f"{o}/ab_{t}{i}.json")) for i in (1, 2)] for t in ("main", "fs", "sw")}
best = lambda t, k: min(r.get(k, float("inf")) for r in runs[t])
ratio = lambda a, b: f"{a / b:.3f}x" if b != float("inf") else "  n/a "     # a configuration the tree refuses
for k in runs["main"][0]:
    a = best("main", k)
    print(f"{k:52} main {a:8.2f}  first-scales {ratio(a, best('fs', k))}  windows {ratio(a, best('sw', k))}")
PY
echo "== fallback on unseen shapes (this tree, then the branch in .fb)"
SHAPES="--m 40,56,72,96,160,320,480 --n 2112,7168,24576 --k 7168,1536"
(cd /tmp && timeout 200 python3 -m fp8gemm.bench.cli $SHAPES --peers none --csv "$OUT/fb_main.csv" \
   > "$OUT/fb_main.log" 2>&1; echo "rc=$?"
 PYTHONPATH=$R/.fb timeout 200 python3 -m fp8gemm.bench.cli $SHAPES --peers none --csv "$OUT/fb_branch.csv" \
   > "$OUT/fb_branch.log" 2>&1; echo "rc=$?")
python3 tools/bench_compare.py "$OUT/fb_branch.csv" "$OUT/fb_main.csv" 2>&1 | tail -25
