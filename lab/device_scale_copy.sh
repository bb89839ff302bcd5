#!/usr/bin/env bash
# One device call: the scales copied into the stage slots by the producer warp (SCALES=copy: the
# kernel's kScaleCopy, forced) against the consumers' own loads (the dispatcher's choice for a
# K-major As), forced tiles and the dispatcher's pick (auto) on the mid-M shapes and 4096^3, one process
# each with DeepGEMM beside it (lab/simple_loop.py); then the GPU suite in the time left
# (LIMIT_S, the call's limit). Carry .peers/deepgemm.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"
for t in copy loads; do
  SCALES=$t ITERS=${ITERS:-11} timeout 150 python3 lab/simple_loop.py "$OUT/sc_$t.json" > "$OUT/sc_$t.log" 2>&1
  echo "$t rc=$?"; tail -2 "$OUT/sc_$t.log"
done
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
runs = {t: json.load(open(f"{out}/sc_{t}.json")) for t in ("copy", "loads") if os.path.exists(f"{out}/sc_{t}.json")}
print("us, and DeepGEMM time / ours in the same process (above 1: ours faster)")
print(f"{'contender':44}{'copy us':>9}{'loads us':>9}{'DG/copy':>9}{'DG/loads':>9}")
c, l = runs.get("copy", {}), runs.get("loads", {})
for label in c:
    if label.endswith("deepgemm"):
        continue
    dg = label.split()[0] + " deepgemm"
    print(f"{label:44}{c[label]:9.2f}{l.get(label, float('nan')):9.2f}{c[dg] / c[label]:9.3f}"
          f"{(l[dg] / l[label]) if label in l else float('nan'):9.3f}")
PY
left=$(( ${LIMIT_S:-590} - SECONDS - 15 ))
echo "suite budget ${left}s"
timeout $left python3 -m pytest -q tests --ignore=tests/test_kernels_compile.py -p no:cacheprovider \
  > "$OUT/suite.log" 2>&1; echo "suite rc=$?"; tail -4 "$OUT/suite.log"; grep -E "^(FAILED|ERROR)" "$OUT/suite.log" | head -20
python3 -m fp8gemm.bench.provenance | grep -E "source_hash|git_"
