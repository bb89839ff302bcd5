#!/usr/bin/env bash
# One device call: the consumers' scale loads with an L1 prefetch D K blocks ahead (lab/simple_loop.py
# PATCH=pfD) against the loads as committed and against no scale loads at all (noscale, the bound),
# on the mid-M shapes, one process per patch, DeepGEMM beside each. Carry .peers/deepgemm.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"
TAGS="none pf4 pf8 pf16 noscale"
for t in $TAGS; do
  PATCH=$t ITERS=${ITERS:-13} timeout 120 python3 lab/simple_loop.py "$OUT/pf_$t.json" > "$OUT/pf_$t.log" 2>&1
  echo "$t rc=$?"
done
python3 - "$OUT" $TAGS <<'PY'
import json, os, sys
out, tags = sys.argv[1], sys.argv[2:]
runs = {t: json.load(open(f"{out}/pf_{t}.json")) for t in tags if os.path.exists(f"{out}/pf_{t}.json")}
print("time / DeepGEMM's time in the same process")
print(f"{'contender':46}" + "".join(f"{t:>9}" for t in runs))
for label in runs["none"]:
    if not label.endswith("deepgemm"):
        dg = label.split()[0] + " deepgemm"
        print(f"{label:46}" + "".join(f"{r[label] / r[dg]:9.3f}" if label in r else f"{'-':>9}" for r in runs.values()))
PY
