#!/usr/bin/env bash
# One device call: lab/simple_loop.py once per TAGS entry SCALES:PATCH, one process each with
# DeepGEMM beside it: default (the dispatcher as committed: the scale windows, SCALE_WINDOW, on
# 128-row and 64 x 128 tiles), window (the windows forced on every tile where they fit), loads (the
# consumers' loads wherever the dispatcher picks windows); PATCH ahead / noahead: the poll-ahead
# loop (kPollAhead) on every tile / on none; prints each time over DeepGEMM's in its process; then
# the GPU suite in what is left of DEADLINE seconds (NO_SUITE=1: none). Carry .peers/deepgemm.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"
TAGS=${TAGS:-"default:none default:noahead"}
for t in $TAGS; do
  SCALES=${t%%:*} PATCH=${t##*:} ITERS=${ITERS:-9} timeout 100 python3 lab/simple_loop.py "$OUT/sw_${t/:/_}.json" \
    > "$OUT/sw_${t/:/_}.log" 2>&1
  echo "$t rc=$?"; grep -m3 -iE "error|assert" "$OUT/sw_${t/:/_}.log"
done
python3 - "$OUT" $TAGS <<'PY'
import json, os, sys
out, tags = sys.argv[1], sys.argv[2:]
runs = {t: json.load(open(f"{out}/sw_{t.replace(':', '_')}.json")) for t in tags
        if os.path.exists(f"{out}/sw_{t.replace(':', '_')}.json")}
print("time / DeepGEMM's time in the same process (below 1: ours faster); us of the first run")
first = next(iter(runs.values()))
print(f"{'contender':44}{'us':>8}" + "".join(f"{t:>14}" for t in runs))
for label in first:
    if not label.endswith("deepgemm"):
        dg = label.split()[0] + " deepgemm"
        print(f"{label:44}{first[label]:8.2f}" +
              "".join(f"{r[label] / r[dg]:14.3f}" if label in r else f"{'-':>14}" for r in runs.values()))
PY
if [ -z "$NO_SUITE" ]; then   # last, in what is left of the call's DEADLINE seconds
  left=$(( ${DEADLINE:-585} - SECONDS )); echo "suite: ${left} s left"
  timeout $left python3 -m pytest -q tests --ignore=tests/test_kernels_compile.py -p no:cacheprovider \
    > "$OUT/suite.log" 2>&1; echo "suite rc=$?"; tail -2 "$OUT/suite.log"; grep -E "^(FAILED|ERROR)" "$OUT/suite.log" | head -20
fi
python3 -m fp8gemm.bench.provenance | grep -E "source_hash|git_"
