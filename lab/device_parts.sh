#!/usr/bin/env bash
# One device call: the lean K loop's three changes, each alone, against this tree on
# lab/ab_configs.py's configurations (K-major As), two rounds in alternating order. The trees:
#   tools/old_tree.sh wip/part-arrive .p1 && tools/old_tree.sh wip/part-loads .p2 &&
#   tools/old_tree.sh wip/part-storeread .p3      (carry .p1 .p2 .p3)
# Prints per configuration this tree's time and each part's ratio (this tree / part: > 1, the
# part is faster), best of the two rounds. Logs under $OUT.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=$PWD
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
# a first round of all four trees at once only compiles (NVRTC on the CPUs, in parallel); its
# times are thrown away
(cd /tmp && for t in base p1 p2 p3; do
   if [ $t = base ]; then python3 "$R/lab/ab_configs.py" "$OUT/warm.$t.json" > "$OUT/warm.$t.log" 2>&1 &
   else PYTHONPATH=$R/.$t python3 "$R/lab/ab_configs.py" "$OUT/warm.$t.json" > "$OUT/warm.$t.log" 2>&1 & fi
 done; wait)
(cd /tmp && for round in 1 2; do
   for t in base p1 p2 p3; do
     if [ $t = base ]; then python3 "$R/lab/ab_configs.py" "$OUT/$t.$round.json" > /dev/null 2>&1
     else PYTHONPATH=$R/.$t python3 "$R/lab/ab_configs.py" "$OUT/$t.$round.json" > /dev/null 2>&1; fi
   done
 done)
python3 - "$OUT" <<'PY'
import json, sys
o = sys.argv[1]
best = {t: {} for t in ("base", "p1", "p2", "p3")}
for t in best:
    for r in (1, 2):
        try:
            for k, v in json.load(open(f"{o}/{t}.{r}.json")).items():
                best[t][k] = min(v, best[t].get(k, v))
        except FileNotFoundError:
            pass
print(f"{'configuration':52} {'base us':>8} {'arrive':>7} {'loads':>7} {'read':>7}")
for k, v in best["base"].items():
    cells = " ".join(f"{v / best[t][k]:7.3f}" if k in best[t] else "    n/a" for t in ("p1", "p2", "p3"))
    print(f"{k:52} {v:8.2f} {cells}")
PY
