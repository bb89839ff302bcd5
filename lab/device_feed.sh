#!/usr/bin/env bash
# One device call: the TMA feed alone, ours and DeepGEMM's. lab/simple_loop.py with TILES=feed (ring
# depths of our 64- and 128-row tiles) twice: as committed with DeepGEMM as built, then with every
# wgmma taken out of both kernels (ours: PATCH=feed; DeepGEMM: its 1D2D header patched in a copy of
# the build, with its own JIT cache), so each time is the feed's and the barriers' alone.
# Carry .peers/deepgemm.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"
PATCH=none TILES=feed timeout 200 python3 lab/simple_loop.py "$OUT/real.json" > "$OUT/real.log" 2>&1; echo "real rc=$?"
rm -rf /tmp/dgfeed && mkdir -p /tmp/dgfeed && cp -r /tmp/deepgemm/DeepGEMM /tmp/dgfeed/
H=/tmp/dgfeed/DeepGEMM/deep_gemm/include/deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh
grep -c "WGMMA::wgmma(a_desc, b_desc, accum, k);" $H
sed -i 's/WGMMA::wgmma(a_desc, b_desc, accum, k);/(void)k;/' $H
PYTHONPATH=/tmp/dgfeed/DeepGEMM DG_JIT_CACHE_DIR=/tmp/dgfeed/jit PATCH=feed TILES=feed timeout 250 \
  python3 lab/simple_loop.py "$OUT/feed.json" > "$OUT/feed.log" 2>&1; echo "feed rc=$?"
tail -3 "$OUT/feed.log"
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
real, feed = json.load(open(f"{out}/real.json")), json.load(open(f"{out}/feed.json"))
print(f"{'contender':52} {'real':>8} {'feed':>8} {'feed/real':>9}")
for l in real:
    print(f"{l:52} {real[l]:8.2f} {feed.get(l, float('nan')):8.2f} {feed.get(l, float('nan')) / real[l]:9.3f}")
PY
