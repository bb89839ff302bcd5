#!/usr/bin/env bash
# One device call for the TAIL_SPLIT branch: its split-K, grouped and MoE GPU tests, then
# lab/tail_split.py on this tree and on the tree in .old (tools/old_tree.sh main .old; carry .old),
# whose "layer T=1 (default)" lines compare the one-token MoE layer before and after (the forced
# lines exist on this tree only). Logs under $OUT.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=$PWD
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/test_matmul_general.py -k "split or tail or swap" \
  > "$OUT/tests.log" 2>&1
echo "general tests rc=$?"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head; tail -1 "$OUT/tests.log"
timeout 200 python3 -m pytest -q -x -p no:cacheprovider tests/test_grouped_gpu.py tests/test_moe_gpu.py \
  > "$OUT/tests_moe.log" 2>&1
echo "grouped / MoE tests rc=$?"; grep -E "^(FAILED|ERROR)" "$OUT/tests_moe.log" | head; tail -1 "$OUT/tests_moe.log"
(cd /tmp && python3 "$R/lab/tail_split.py" > "$OUT/new.txt" 2>&1; \
 PYTHONPATH=$R/.old python3 - > "$OUT/old.txt" 2>&1 <<'PY'
import cupy, numpy as np, fp8gemm
from fp8gemm.bench.moe import MODELS, cases, fp8_bytes
from fp8gemm.bench.timing import L2Flush, time_calls
fns, grng = {}, cupy.random.RandomState(3)
for name, (e, h, i) in MODELS.items():
    w1, w2 = fp8_bytes((e, 2 * i, h), grng), fp8_bytes((e, h, i), grng)
    s1 = cupy.full((e, 2 * i // 128, h // 128), 1.0 / (32 * h ** 0.5), dtype=cupy.float32)
    s2 = cupy.full((e, h // 128, i // 128), 1.0 / (32 * i ** 0.5), dtype=cupy.float32)
    (_, _, ids, wts), = cases([1], e, ["uniform"], seed=7)
    x, xs = fp8_bytes((1, h), grng), cupy.full((1, h // 128), 1.0 / 64, dtype=cupy.float32)
    a, b = cupy.asarray(ids), cupy.asarray(wts)
    fns[f"{name} layer T=1 (default)"] = lambda x=x, xs=xs, a=a, b=b, w1=w1, s1=s1, w2=w2, s2=s2: fp8gemm.moe(x, a, b, w1, s1, w2, s2, x_scale=xs)
for f in fns.values(): f()
cupy.cuda.Device().synchronize()
for k, v in time_calls(fns, L2Flush(), 30).items(): print(f"{k:60} {v:9.2f} us")
PY
)
echo "== old tree (main)"; cat "$OUT/old.txt" | tail -3
echo "== this tree"; cat "$OUT/new.txt" | tail -30
