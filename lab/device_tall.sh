#!/usr/bin/env bash
# One device call for the 256-row tiles (dispatch/tall.py), in steps (STEPS, default all):
#   tests  their GPU tests and the grouped / numerics tests that force them
#   moe    lab/tall_tiles.py moe: the MoE grouped GEMMs, General / Wg3 / Tall (+ DeepGEMM if built)
#   ncu    DRAM bytes of each V4-Flash contender (lab/tall_tiles.py run-moe under ncu)
#   dense  lab/tall_tiles.py dense: large-M plain GEMMs against General, Wg3 and DeepGEMM
#   dg     build DeepGEMM first (.peers/deepgemm/build.sh: carry .peers/deepgemm)
# Tables to stdout, logs and JSON under $OUT.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
STEPS=${STEPS:-"tests moe ncu dense"}
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
if [[ " $STEPS " == *" dg "* ]]; then
  . .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"
fi
if [[ " $STEPS " == *" tests "* ]]; then
  timeout 300 python3 -m pytest -q -x tests/test_matmul_tall.py tests/test_validate_grouped.py \
    "tests/test_grouped_gpu.py::test_forced_tiles_contiguous_and_masked" "tests/test_grouped_gpu.py::test_forced_tile_refused" \
    tests/test_numerics_gpu.py -k "tall or forced or refused or validate" > "$OUT/tests.log" 2>&1
  echo "tests rc=$?"; tail -3 "$OUT/tests.log"
fi
if [[ " $STEPS " == *" moe "* ]]; then
  python3 lab/tall_tiles.py moe "$OUT/moe.json" > "$OUT/moe.log" 2>&1; echo "moe rc=$?"
  python3 - "$OUT/moe.json" <<'EOF'
import json, sys
us = json.load(open(sys.argv[1]))
cases = sorted({k.rsplit(" ", 1)[0] for k in us})
kinds = ["general", "wg3", "tall", "deepgemm"]
print(f"{'case':28}" + "".join(f"{k:>10}" for k in kinds) + "  tall/best-other")
for c in cases:
    row = {k: us.get(f"{c} {k}") for k in kinds}
    others = [v for k, v in row.items() if v is not None and k != "tall"]
    ratio = min(others) / row["tall"] if row["tall"] and others else float("nan")
    print(f"{c:28}" + "".join(f"{v:10.1f}" if v else f"{'-':>10}" for v in row.values()) + f"  {ratio:6.3f}")
EOF
fi
if [[ " $STEPS " == *" ncu "* ]]; then
  M=gpu__time_duration.sum,dram__bytes_read.sum
  MODEL_ONLY=flash timeout 200 ncu --nvtx --nvtx-include "prof/" --metrics "$M" --csv --page raw \
    python3 lab/tall_tiles.py run-moe > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
  echo "ncu rc=$?"
  python3 - "$OUT/ncu.csv" <<'EOF'
import sys
sys.path.insert(0, "lab")
from moe_ncu_table import read_ncu
for name, v in read_ncu(sys.argv[1]):
    print(f"{name[:70]:70} {v.get('us', 0):10.1f} us {v.get('dram_rd', 0) / 1e9:8.3f} GB")
EOF
fi
if [[ " $STEPS " == *" dense "* ]]; then
  python3 lab/tall_tiles.py dense "$OUT/dense.json" > "$OUT/dense.log" 2>&1; echo "dense rc=$?"
  grep -v "^\[" "$OUT/dense.log" | tail -60
fi
