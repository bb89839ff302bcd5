#!/usr/bin/env bash
# One device call: what slows our TMA feed against DeepGEMM's (bench/NOTES.md, the feed alone).
# lab/simple_loop.py with TILES=feed, one process per variant, DeepGEMM as built beside each:
# real and feed-only kernels, each as committed, with the scale loads replaced by 1.0 (noscale),
# with one CTA per SM (GRID=sms), with the largest shared-memory carve-out (CARVEOUT=100), and with
# DeepGEMM's explicit evict-normal L2 hint on every TMA load (hint).
# Carry .peers/deepgemm.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"
run() {  # tag, then environment assignments
  local tag=$1; shift
  env "$@" TILES=feed ITERS=${ITERS:-11} timeout 100 python3 lab/simple_loop.py "$OUT/why_$tag.json" \
    > "$OUT/why_$tag.log" 2>&1; echo "$tag rc=$?"
}
run real PATCH=none
run noscale PATCH=noscale
run grid PATCH=none GRID=sms
run carve PATCH=none CARVEOUT=100
run hint PATCH=hint
run feed PATCH=feed
run feed_noscale PATCH=feed,noscale
run feed_grid PATCH=feed GRID=sms
run feed_carve PATCH=feed CARVEOUT=100
run feed_hint PATCH=feed,hint
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
tags = ["real", "noscale", "grid", "carve", "hint", "feed", "feed_noscale", "feed_grid", "feed_carve", "feed_hint"]
runs = {t: json.load(open(f"{out}/why_{t}.json")) for t in tags if os.path.exists(f"{out}/why_{t}.json")}
print("time / DeepGEMM's real time in the same process")
print(f"{'contender':50}" + "".join(f"{t:>13}" for t in runs))
for label in runs["real"]:
    if label.endswith("deepgemm"):
        continue
    dg = label.split()[0] + " deepgemm"
    print(f"{label:50}" + "".join(f"{r[label] / r[dg]:13.3f}" if label in r else f"{'-':>13}" for r in runs.values()))
PY
