#!/usr/bin/env bash
# One device call, no peers: fp8gemm with a K-major As (the quantizer's default) against an
# M-major one (m_major_scales=True, As by TMA into the stage slots), forced tiles and the
# dispatcher's pick on the mid-M shapes and 4096^3 (lab/simple_loop.py, one process each).
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
for t in k-major m-major; do
  ASCALE=$t ITERS=${ITERS:-9} timeout 80 python3 lab/simple_loop.py "$OUT/as_$t.json" > "$OUT/as_$t.log" 2>&1
  echo "$t rc=$?"
done
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
k, m = (json.load(open(f"{out}/as_{t}.json")) for t in ("k-major", "m-major"))
print(f"{'contender':44}{'K-major us':>11}{'M-major us':>11}{'K / M':>8}")
for label in k:
    print(f"{label:44}{k[label]:11.2f}{m.get(label, float('nan')):11.2f}{k[label] / m.get(label, float('nan')):8.3f}")
PY
