#!/usr/bin/env bash
# One device call (session 40, issues 55 and 29), parts by switch; carry .peers.
#   GTEST=1  the dense grouped GPU tests (pairs sharing B: multicast within one group only)
#   STORE64=1 the dense tests of widths with 64-byte-multiple or 16 / 32-byte rows, FP8GEMM_DENSE_STORE_64B=1
#            and FP8GEMM_DENSE_STORE_NARROW=1
#   GAB=1    the dense grouped mode against our default tile and DeepGEMM (lab/grouped_dense_ab.py);
#            GAB_B="VAR=1;VAR2=1" again with each environment, same call (GAB_ROUTING=skewed: skewed routing)
#   DGTILE=1 the dense kernel at DeepGEMM's own tile vs DeepGEMM and our table (lab/dense_dgtile.py);
#            DGTILE_B="VAR=1;VAR2=1 VAR3=1" again with each environment (DGTILE_B_SHAPES), same call
#   BI=1     issue 57: the dense evidence tests and the default picks rule GPU test
#   BIQ=1    the mode's cost (fp8gemm-bench --quick --batch-invariant, no peers), the rule off and on
#   UNSEEN=1 fp8gemm-bench --unseen against DeepGEMM (UNSEEN_M: its M values; UNSEEN_PEERS)
#   TUNE=1   fp8gemm-tune over the trace (DeepGEMM's tile among the dense candidates); --state lets
#            a later call finish (STATE: the earlier state file)
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache} PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
if [ -n "$GAB$DGTILE$UNSEEN" ]; then
  . .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"; tail -1 "$OUT/deepgemm_build.log"
fi
if [ -n "$GTEST" ]; then
  timeout ${GTEST_S:-150} python3 -m pytest -q -x -p no:cacheprovider -n 8 tests/test_grouped_gpu.py -k "dense" $GTEST_MORE \
    > "$OUT/grouped_tests.log" 2>&1; echo "grouped dense tests rc=$?"; tail -3 "$OUT/grouped_tests.log" | cut -c1-300
fi
if [ -n "$STORE64" ]; then     # the 64B-swizzled staging (96-column bf16 tiles) switched on
  FP8GEMM_DENSE_STORE_64B=1 FP8GEMM_DENSE_STORE_NARROW=1 timeout ${STORE64_S:-120} python3 -m pytest -q -x -p no:cacheprovider -n 8 \
    tests/test_matmul_dense.py tests/test_grouped_gpu.py -k "dense and (96 or 48 or 160 or 32 or 16)" > "$OUT/store64_tests.log" 2>&1
  echo "store64 tests rc=$?"; tail -3 "$OUT/store64_tests.log" | cut -c1-300
fi
if [ -n "$GAB" ]; then
  GAB_CONFIGS=${GAB_CONFIGS:-0,5,6,7} GAB_LAYERS=${GAB_LAYERS:-0,1} timeout ${GAB_S:-150} \
    python3 lab/grouped_dense_ab.py "$OUT/gab.json" ${ITERS:-10} ${GAB_TOKENS:-4096,8192} 2>&1 | grep -v Warn \
    > "$OUT/gab.log"; echo "grouped ab rc=${PIPESTATUS[0]}"; grep -E "T=|Error" "$OUT/gab.log" | cut -c1-140
  i=0; IFS=';' read -ra gvariants <<< "$GAB_B"
  for v in "${gvariants[@]}"; do   # again with each environment of GAB_B ("A=1;B=1 C=1"), same call
    i=$((i + 1))
    env $v GAB_CONFIGS=${GAB_CONFIGS:-0,5,6,7} GAB_LAYERS=${GAB_LAYERS:-0,1} timeout ${GAB_S:-150} \
      python3 lab/grouped_dense_ab.py "$OUT/gab_b$i.json" ${ITERS:-10} ${GAB_TOKENS:-4096,8192} 2>&1 | grep -v Warn \
      > "$OUT/gab_b$i.log"; echo "grouped ab b$i ($v) rc=${PIPESTATUS[0]}"; grep -E "T=|Error" "$OUT/gab_b$i.log" | cut -c1-140
  done
fi
if [ -n "$DGTILE" ]; then
  timeout ${AB_S:-190} python3 lab/dense_dgtile.py "$OUT/dgtile.json" ${ITERS:-15} 2>&1 | grep -v Warn > "$OUT/dgtile.log"
  echo "dgtile rc=${PIPESTATUS[0]}"; grep -E "past|Error|DeepGEMM's tile" "$OUT/dgtile.log" | cut -c1-150
  i=0; IFS=';' read -ra variants <<< "$DGTILE_B"
  for v in "${variants[@]}"; do   # again with each environment of DGTILE_B ("A=1;B=1 C=1"), same call
    i=$((i + 1))
    env $v DGTILE_SHAPES="${DGTILE_B_SHAPES:-$DGTILE_SHAPES}" timeout ${AB_S:-190} \
      python3 lab/dense_dgtile.py "$OUT/dgtile_b$i.json" ${ITERS:-15} 2>&1 | grep -v Warn > "$OUT/dgtile_b$i.log"
    echo "dgtile b$i ($v) rc=${PIPESTATUS[0]}"
  done
  python3 - "$OUT/dgtile.json" "$OUT"/dgtile_b*.json <<'PY'
import json, os, sys
for path in sys.argv[1:]:
  if not os.path.exists(path):
    continue
  print(os.path.basename(path))
  rows = json.load(open(path))
  shapes = sorted({(r["m"], r["n"], r["k"]) for r in rows}, key=lambda s: (s[2], s[1], s[0]))
  for s in shapes:
    rr = [r for r in rows if (r["m"], r["n"], r["k"]) == s]
    dg = next(r["us"] for r in rr if r["name"] == "deepgemm")
    print("%5dx%5dx%5d DG %7.2f | " % (*s, dg) + " | ".join("%s %.3f" % (r["name"].replace("dense ", ""), r["vs_dg"]) for r in rr if r["name"] != "deepgemm"))
PY
fi
if [ -n "$BI" ]; then
  timeout ${BI_S:-170} python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_batch_invariant.py -k "default_pick" -rxXf \
    > "$OUT/bi_tests.log" 2>&1; echo "bi tests rc=$?"; grep -E "^(XFAIL|XPASS|FAILED)|passed|failed" "$OUT/bi_tests.log" | cut -c1-200 | tail -20
fi
if [ -n "$BIQ" ]; then
  for d in 0 1; do
    FP8GEMM_BATCH_INVARIANT_DEFAULT_PICKS=$d timeout ${BIB_S:-120} python3 -m fp8gemm.bench --quick --batch-invariant --peers none \
      --iters 10 --csv "$OUT/bi_quick_picks$d.csv" > "$OUT/bi_quick_picks$d.log" 2>&1; echo "bi quick dense=$d rc=$?"
  done
  python3 - "$OUT" <<'PY'
import csv, math, sys
for d in (0, 1):
    try:
        rows = list(csv.DictReader(open(f"{sys.argv[1]}/bi_quick_picks{d}.csv")))
    except OSError:
        continue
    bands = {"M<=64": lambda m: m <= 64, "64<M<=256": lambda m: 64 < m <= 256, "256<M<1024": lambda m: 256 < m < 1024,
             "M>=1024": lambda m: m >= 1024}
    out = []
    for name, f in bands.items():
        r = [float(x["invariant_us"]) / float(x["ours_us"]) for x in rows if f(int(x["M"])) and x["invariant_us"]]
        if r:
            out.append("%s %.3fx" % (name, math.exp(sum(map(math.log, r)) / len(r))))
    print("mode/default, default picks %s: " % ("on" if d else "off") + ", ".join(out))
PY
fi
if [ -n "$UNSEEN" ]; then
  timeout ${UNSEEN_S:-300} python3 -m fp8gemm.bench --unseen ${UNSEEN_M:+--m $UNSEEN_M} --peers ${UNSEEN_PEERS:-deepgemm} \
    --iters 10 --csv "$OUT/unseen.csv" > "$OUT/unseen.log" 2>&1; echo "unseen rc=$?"; tail -14 "$OUT/unseen.log" | cut -c1-160
fi
if [ -n "$TUNE" ]; then
  tag=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oiE "H[0-9]{3}" | tr A-Z a-z)
  [ -n "$STATE" ] && cp "$STATE" "$OUT/tune.state.json"
  timeout ${TUNE_S:-240} python3 -m fp8gemm.bench.tune --out "$OUT/$tag.json" --state "$OUT/tune.state.json" \
    --warm-workers 12 $TUNE_ARGS > "$OUT/tune.log" 2>&1; echo "tune rc=$?"; tail -8 "$OUT/tune.log"
fi
python3 -m fp8gemm.bench.provenance . 2>/dev/null | grep -E "source_hash"
