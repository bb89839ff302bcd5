#!/usr/bin/env bash
# One device call: lab/simple_loop.py once per patch in TAGS (its PATCH values; none: the kernel as
# committed), forced tiles and the dispatcher's pick on the mid-M shapes and 4096^3, DeepGEMM beside
# each process; prints each time over DeepGEMM's in the same process. Default TAGS: the consumers'
# scale loads against a per-warp shared ring filled by cp.async D blocks ahead and read after a
# counted wait (ringD, D = 4, 8) and against no scale loads at all (noscale, the bound). The L1
# prefetch of the scales measured in bench/NOTES.md: TAGS="none pf4 pf8 pf16 noscale".
# Carry .peers/deepgemm.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"
TAGS=${TAGS:-"none ring4 ring8 noscale"}
for t in $TAGS; do
  PATCH=$t ITERS=${ITERS:-11} timeout 150 python3 lab/simple_loop.py "$OUT/ring_$t.json" > "$OUT/ring_$t.log" 2>&1
  echo "$t rc=$?"; grep -m3 -iE "error|assert" "$OUT/ring_$t.log"
done
python3 - "$OUT" $TAGS <<'PY'
import json, os, sys
out, tags = sys.argv[1], sys.argv[2:]
runs = {t: json.load(open(f"{out}/ring_{t}.json")) for t in tags if os.path.exists(f"{out}/ring_{t}.json")}
print("time / DeepGEMM's time in the same process (us of main's kernel in the first column)")
print(f"{'contender':46}{'us':>8}" + "".join(f"{t:>9}" for t in runs))
for label in runs["none"]:
    if not label.endswith("deepgemm"):
        dg = label.split()[0] + " deepgemm"
        print(f"{label:46}{runs['none'][label]:8.2f}" +
              "".join(f"{r[label] / r[dg]:9.3f}" if label in r else f"{'-':>9}" for r in runs.values()))
PY
