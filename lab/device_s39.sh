#!/usr/bin/env bash
# One device call (session 39, issue 55): (1) the K-major As window ring (windows of 8 and of 4 K
# blocks, one process each) against M-major As and DeepGEMM (lab/dense_ab.py, DENSE_AB_CASES);
# (2) ncu of the dense grouped mode's DRAM reads with exact rows per expert (lab/grouped_dense_l2.py);
# (3) the dense kernel's GPU tests. Carry .peers.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache} PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; echo "deepgemm build rc=$?"; tail -2 "$OUT/deepgemm_build.log"
timeout ${T_S:-150} python3 -m pytest -q -x -p no:cacheprovider -n 8 tests/test_matmul_dense.py tests/test_grouped_gpu.py \
  > "$OUT/dense_tests.log" 2>&1; echo "dense tests rc=$?"; tail -3 "$OUT/dense_tests.log" | cut -c1-200
for w in ${WINDOWS:-8}; do
  echo "== window $w"
  FP8GEMM_DENSE_SFA_WINDOW=$w DENSE_AB_CASES=${CASES:-0,2,3} timeout ${AB_S:-120} python3 lab/dense_ab.py "$OUT/dense_ab_w$w.json" ${ITERS:-15} \
    2>&1 | grep -v Warn | tee "$OUT/dense_ab_w$w.log" | tail -14
done
M="dram__bytes_read.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct"
timeout ${NCU_S:-200} ncu --profile-from-start off --metrics "$M" --csv --page raw python3 lab/grouped_dense_l2.py \
  > "$OUT/l2.csv" 2> "$OUT/l2.err"; echo "ncu rc=$?"
python3 - "$OUT/l2.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
if rows:
    h = rows[0]; idx = {c: h.index(c) for c in h}
    for r in rows[2:]:
        print(r[idx["Kernel Name"]][:60], *(f"{c}={r[idx[c]]}" for c in h if c.startswith(("dram", "gpu__", "lts"))))
PY
grep -E "launch:" "$OUT/l2.csv" | head -12
python3 -m fp8gemm.bench.provenance . 2>/dev/null | grep -E "source_hash"
