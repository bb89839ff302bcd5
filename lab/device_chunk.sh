#!/usr/bin/env bash
# One device call (issue 27): the chunked K loop. DeepGEMM builds in the background while the
# general kernel's GPU tests run (they force the chunked loop, bitwise against the rolled loops);
# then fp8gemm-bench on lab/shapes_chunk.csv in two processes, each with DeepGEMM beside it: the
# shipped table with the chunked loop off (CHUNK=off: the rolled loops as before) and the table of
# lab/chunk_table.py (chunk-fitting stages) with it on. Carry .peers/deepgemm.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
(bash -c '. .peers/deepgemm/build.sh' > "$OUT/deepgemm_build.log" 2>&1 &)
timeout ${TEST_S:-200} python3 -m pytest -q -x tests/test_matmul_general.py tests/test_dispatch.py -p no:cacheprovider \
  > "$OUT/tests.log" 2>&1; echo "tests rc=$?"; tail -2 "$OUT/tests.log"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head
while pgrep -f "setup.py build_ext" > /dev/null; do sleep 2; done
. .peers/deepgemm/build.sh >> "$OUT/deepgemm_build.log" 2>&1; tail -1 "$OUT/deepgemm_build.log"
python3 lab/chunk_table.py /tmp/chunk_table.json
for t in off on; do
  if [ $t = on ]; then export FP8GEMM_TABLE=/tmp/chunk_table.json; fi
  CHUNK=$t timeout ${EACH_S:-140} python3 lab/bench_chunk.py --shapes lab/shapes_chunk.csv --peers deepgemm \
    --iters ${ITERS:-9} --warm-workers 12 --csv "$OUT/b_$t.csv" > "$OUT/b_$t.log" 2>&1
  echo "$t rc=$?"; grep -m3 -iE "error|assert|mismatch" "$OUT/b_$t.log"
done
python3 - "$OUT" <<'PY'
import csv, math, os, sys, types
from fp8gemm.dispatch import select, general as g
out = sys.argv[1]

def config(m, n, k):     # the "on" run's pick (FP8GEMM_TABLE is the chunk table here) and its chunk
    c = select(m, n, k)
    stub = types.SimpleNamespace(out_dtype="bfloat16", k=k, m=m, n=n, sa_stride_k=1, sb_stride_k=1)
    ch = g.chunk_blocks(stub, c, 132) if type(c) is g.General else 0
    return c.label().replace("sm90_fp8_gemm_", "") + (f" c{ch}" if ch else "")
runs = {t: {(r["M"], r["N"], r["K"]): r for r in csv.DictReader(open(f"{out}/b_{t}.csv"))}
        for t in ("off", "on") if os.path.exists(f"{out}/b_{t}.csv")}
print("time / DeepGEMM's time in the same process (below 1: ours faster)")
print(f"{'M':>5} {'N':>5} {'K':>5} {'config (on)':34}{'DG us':>8}{'off':>8}{'on':>8}{'on/off':>8}")
lq = {t: [] for t in runs}; lr = []
for key, r in runs.get("on", {}).items():
    q = {}
    for t, rr in runs.items():
        x = rr.get(key)
        if x and x["deepgemm_us"]:
            q[t] = float(x["ours_us"]) / float(x["deepgemm_us"]); lq[t].append(math.log(q[t]))
    if len(q) == 2: lr.append(math.log(q["on"] / q["off"]))
    print(f"{key[0]:>5} {key[1]:>5} {key[2]:>5} {config(*map(int, key))[:33]:34}{float(r['deepgemm_us'] or 'nan'):8.2f}"
          + "".join(f"{q.get(t, float('nan')):8.3f}" for t in ("off", "on"))
          + (f"{q['on'] / q['off']:8.3f}" if len(q) == 2 else ""))
print("geomean", *(f"{t} {math.exp(sum(v) / len(v)):.3f}" for t, v in lq.items() if v), f"on/off {math.exp(sum(lr) / max(len(lr), 1)):.3f}")
PY
python3 -m fp8gemm.bench.provenance | grep -E "source_hash"
