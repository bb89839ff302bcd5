#!/usr/bin/env bash
# One device call: the As-by-TMA kernel's GPU tests (general, grouped, MoE), then this tree
# against the tree in .old (tools/old_tree.sh) on lab/ab_configs.py's configurations, alternating,
# two runs each. Logs under $OUT.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=$PWD
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
(cd /tmp && PYTHONPATH=$R/.old python3 "$R/lab/ab_configs.py" "$OUT/ab_old0.json" > /dev/null 2>&1) &
timeout 300 python3 -m pytest -q -p no:cacheprovider -x tests/test_matmul_general.py -k "scale_sources or nan_poisoned or tails or forced or split" \
    > "$OUT/tests_general.log" 2>&1; echo "general rc=$?"; tail -3 "$OUT/tests_general.log"
wait
timeout 200 python3 -m pytest -q -p no:cacheprovider -x tests/ -k "grouped or moe or swiglu" -m gpu \
    > "$OUT/tests_grouped.log" 2>&1; echo "grouped rc=$?"; tail -3 "$OUT/tests_grouped.log"
(cd /tmp && for i in 1 2; do
   PYTHONPATH=$R/.old python3 "$R/lab/ab_configs.py" "$OUT/ab_old$i.json" > /dev/null 2>&1
   python3 "$R/lab/ab_configs.py" "$OUT/ab_new$i.json" > "$OUT/ab_new$i.log" 2>&1
 done)
python3 - "$OUT" <<'PY'
import json, sys
o = sys.argv[1]
runs = {t: [json.load(open(f"{o}/ab_{t}{i}.json")) for i in (1, 2)] for t in ("old", "new")}
best = lambda t, k: min(r.get(k, float("inf")) for r in runs[t])
for k in runs["old"][0]:
    a, b = best("old", k), best("new", k)
    print(f"{k:52} old {a:8.2f}  new {b:8.2f}  " + (f"{a / b:.3f}x" if b != float("inf") else "n/a"))
PY
