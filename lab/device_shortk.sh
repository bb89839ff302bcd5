#!/usr/bin/env bash
# One device call for the short-K kernel (session 5): its GPU tests, a fp8gemm-tune run over the
# trace's K = 256 shapes merged into dispatch/h200.json (--update), then fp8gemm-bench on those
# shapes with the new table. Logs and the table go to $OUT.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
MS=1,2,4,8,16,24,32,48,64,100,128,158,184,214,256,384,512,1024,2048,4096,8192,16384
python3 -m pip install -q --no-deps --no-build-isolation . 2>&1 | tail -3
echo "== short-K tests"
timeout 240 python3 -m pytest -q -x -p no:cacheprovider tests/test_matmul_short_k.py tests/test_numerics_gpu.py \
  tests/test_kernels_compile.py > "$OUT/tests.log" 2>&1; echo "rc=$?"; tail -3 "$OUT/tests.log"
echo "== tune K=256"
timeout 200 fp8gemm-tune --m $MS --n 512,1536,4096,8192 --k 256 --iters 7 --update \
  --state "$OUT/k256.state.json" > "$OUT/tune.log" 2>&1; echo "rc=$?"; tail -c 400 "$OUT/tune.log"
cp dispatch/h200.json "$OUT/h200.json"
python3 -m pip install -q --no-deps --no-build-isolation . 2>&1 | tail -3
echo "== bench K=256"
timeout 120 fp8gemm-bench --m $MS --n 512,1536,4096,8192 --k 256 --csv "$OUT/k256.csv" > "$OUT/bench.log" 2>&1
echo "rc=$?"; tail -12 "$OUT/bench.log"
