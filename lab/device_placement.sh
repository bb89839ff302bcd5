#!/usr/bin/env bash
# One device call: lab/placement.py in three processes (operand and code placement), then a table of
# each configuration's times per process: d = operand copy, c = code copy, two orders each.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=/tmp/cupy_cache
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
R=$PWD; cd /tmp
for p in 1 2 3; do python3 $R/lab/placement.py $OUT/p$p.json 3 3 2>&1 | tail -3; nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader; done
python3 - $OUT <<'PY'
import json,sys,statistics as st,collections
o=sys.argv[1]
runs=[json.load(open(f"{o}/p{p}.json")) for p in (1,2,3)]
cfgs=collections.OrderedDict()
for k in runs[0]:
    cfgs.setdefault(k.rsplit(" ",2)[0],[]).append(k)
for c,ks in cfgs.items():
    print(c)
    for p,r in enumerate(runs):
        row=" ".join(f"{r[k][0]:7.2f}/{r[k][1]:<7.2f}" for k in ks)
        print(f"  p{p+1} {row}")
PY
