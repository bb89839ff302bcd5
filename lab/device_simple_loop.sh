#!/usr/bin/env bash
# One device call: lab/simple_loop.py as committed and with one accumulator per K block (PATCH
# simple / simple2), each in its own process with DeepGEMM beside. Carry .peers/deepgemm.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"
for p in ${PATCHES:-none simple simple2}; do
  PATCH=$p timeout 150 python3 lab/simple_loop.py "$OUT/simple_$p.json" > "$OUT/simple_$p.log" 2>&1; echo "$p rc=$?"
done
python3 - "$OUT" <<'PY'
import json, sys, os
out = sys.argv[1]
runs = {p: json.load(open(f"{out}/simple_{p}.json")) for p in ("none", "simple", "simple2") if os.path.exists(f"{out}/simple_{p}.json")}
labels = list(next(iter(runs.values())))
print(f"{'contender':58}" + "".join(f"{p:>10}" for p in runs) + "   (us; then / deepgemm of the same process)")
for l in labels:
    shape = l.split()[0]
    print(f"{l:58}" + "".join(f"{r.get(l, float('nan')):10.2f}" for r in runs.values())
          + "".join(f"{r.get(l, float('nan')) / r[shape + ' deepgemm']:7.3f}" for r in runs.values()))
PY
