#!/usr/bin/env bash
# One device call for the As-by-TMA branch (M-major As into stage slots) with the leaner K loops
# (predicated arrival and next-block scale loads, general and wg3 kernels): its GPU tests, then
# this tree against the tree in .old (tools/old_tree.sh main .old) on lab/ab_configs.py's
# configurations with a K-major As (both trees load it) and an M-major one (here: the slots),
# alternating processes. Logs under $OUT.
# STEPS="gen ab" (default) picks the parts: gen, the general and wg3 kernels' tests (~3 min); suite, the
# whole GPU suite (~7 of a call's 10 minutes); ab, the A/B. The last column compares this tree's
# M-major As (slots) with the old tree's K-major As (loads), the fastest layout before. The K-major
# column is the lean loop alone (same scale source as the old tree).
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=$PWD
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
STEPS=${STEPS:-gen ab}
if [[ " $STEPS " == *" gen "* ]]; then
  timeout 300 python3 -m pytest -q -x -p no:cacheprovider tests/test_matmul_general.py tests/test_matmul_wg3.py tests/test_quantize_gpu.py tests/test_dispatch.py > "$OUT/gen.log" 2>&1
  echo "gen rc=$?"; grep -E "^(FAILED|ERROR)" "$OUT/gen.log" | head; tail -1 "$OUT/gen.log"
fi
if [[ " $STEPS " == *" suite "* ]]; then
  timeout 540 python3 -m pytest -q -p no:cacheprovider tests > "$OUT/suite.log" 2>&1
  echo "suite rc=$?"; grep -E "^(FAILED|ERROR)" "$OUT/suite.log" | head; tail -1 "$OUT/suite.log"
fi
[[ " $STEPS " == *" ab "* ]] || exit 0
# compile first, all four processes at once (their times are thrown away)
(cd /tmp && for layout in kmajor mmajor; do
   PYTHONPATH=$R/.old python3 "$R/lab/ab_configs.py" "$OUT/warm_old_$layout.json" $layout > /dev/null 2>&1 &
   python3 "$R/lab/ab_configs.py" "$OUT/warm_new_$layout.json" $layout > /dev/null 2>&1 &
 done; wait)
(cd /tmp && for layout in kmajor mmajor; do
   PYTHONPATH=$R/.old python3 "$R/lab/ab_configs.py" "$OUT/ab_old_$layout.json" $layout > /dev/null 2>&1
   python3 "$R/lab/ab_configs.py" "$OUT/ab_new_$layout.json" $layout > /dev/null 2>&1
 done)
python3 - "$OUT" <<'PY'
import json, sys
o = sys.argv[1]
nan = float("nan")
best_k = json.load(open(f"{o}/ab_old_kmajor.json"))
for layout in ("kmajor", "mmajor"):
    a, b = (json.load(open(f"{o}/ab_{t}_{layout}.json")) for t in ("old", "new"))
    for k in a:
        print(f"{layout} {k:52} old {a[k]:8.2f}  new {b.get(k, nan):8.2f}  {a[k] / b.get(k, nan):.3f}x"
              f"  old K-major / new {best_k.get(k, nan) / b.get(k, nan):.3f}x")
PY
