#!/usr/bin/env bash
# One device call (session 39, issue 55): ncu of the dense grouped mode's DRAM reads with exact rows
# per expert (lab/grouped_dense_l2.py), then fp8gemm-tune over the whole trace with the dense
# candidates (the K-major window ring at M-major speed), the table into $OUT/<gpu>.json.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache} PYTHONPATH=$PWD XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
tag=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oiE "H[0-9]{3}" | tr A-Z a-z)
M="dram__bytes_read.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct"
timeout ${NCU_S:-200} ncu --profile-from-start off --metrics "$M" --csv --page raw python3 lab/grouped_dense_l2.py \
  > "$OUT/l2.csv" 2> "$OUT/l2.err"; echo "ncu rc=$?"; tail -3 "$OUT/l2.err"
python3 - "$OUT/l2.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
if rows:
    h = rows[0]; idx = {c: h.index(c) for c in h}
    for r in rows[2:]:
        print(r[idx["Kernel Name"]][:50], *(f"{c.split('.')[0]}={r[idx[c]]}" for c in h if c.startswith(("dram", "gpu__", "lts"))))
PY
grep -E "^launch:" "$OUT/l2.csv" | head -12
# after ncu (not beside it: the tuner's timings need the GPU to themselves)
[ -n "$STATE" ] && cp "$STATE" "$OUT/tune.state.json"
timeout ${TUNE_S:-330} python3 -m fp8gemm.bench.tune --out "$OUT/$tag.json" --state "$OUT/tune.state.json" \
  --warm-workers 12 $TUNE_ARGS > "$OUT/tune.log" 2>&1; echo "tune rc=$?"; tail -14 "$OUT/tune.log"
python3 -m fp8gemm.bench.provenance . 2>/dev/null | grep -E "source_hash"
