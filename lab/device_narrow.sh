#!/usr/bin/env bash
# One device call (issue 27, branch wip/narrow-store): the general kernel's tiles of 8-32 bf16
# columns store one unswizzled TMA box (NarrowStaging) instead of the masked direct stores. First
# the GPU tests that run those tiles (every tail, NaN borders, split K), then the trace shapes
# whose pick is such a tile (lab/shapes_narrow.csv) with the store off and on, each in its own
# process with DeepGEMM. Carry .peers/deepgemm.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
. .peers/deepgemm/build.sh > "$OUT/deepgemm_build.log" 2>&1; tail -1 "$OUT/deepgemm_build.log"
timeout ${TEST_S:-260} python3 -m pytest -q -x tests/test_matmul_general.py tests/test_dispatch.py \
  tests/test_launcher_params.py -p no:cacheprovider > "$OUT/tests.log" 2>&1
echo "tests rc=$?"; tail -2 "$OUT/tests.log"
. lab/ab_knob.sh; ab_knob NARROW lab/shapes_narrow.csv ${ITERS:-15}
python3 -m fp8gemm.bench.provenance | grep -E "source_hash"
