#!/usr/bin/env bash
# The first call after FP8GEMM_DENSE_A_BOX_SHIFT and FP8GEMM_DENSE_SFA_WIDE_WINDOW go on by default (their
# 256-row flat-As spill mended and the compile sweep passed; bench/NOTES.md, session 50): why the first calls after precompile
# compiled (lab/precompile_probe.py, a fresh process), then the whole GPU suite on the commit with
# the shipped defaults only (no lab switch exported: session 50's suite had two on), then issue 57's
# 500 random pairs per dtype. Run from a clean copy of the commit with DeepGEMM in .peers (carry it):
#   bash lab/device_s50.sh            (PROBE_S, SUITE_S, BI500_S override the limits)
# Next call: the retune of the partly-past tiles,
#   TUNE_ON=any TUNE_SHAPES=lab/shapes_partial_tiles.csv SUITE_S=0 UNSEEN_S=0 MODEL_S=0 TRACE_S=250 bash lab/device_s42.sh
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout ${PROBE_S:-80} python3 "$(dirname "$0")/precompile_probe.py" > "$OUT/probe.log" 2>&1; echo "probe rc=$?"
grep -E "^call|^case|^precompile|nvrtc compiles|compiled:" "$OUT/probe.log" | cut -c1-200
SUITE_S=${SUITE_S:-430} UNSEEN_S=0 MODEL_S=0 BI500_S=${BI500_S:-140} bash "$(dirname "$0")/device_s42.sh"
