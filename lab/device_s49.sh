#!/usr/bin/env bash
# Session 49's next first call (bench/NOTES.md, session 49): the whole GPU suite with every pending
# dense lab switch on (one run clears all four for correctness), then issue 57's 500 random pairs per
# dtype. Run from a clean copy of the commit with DeepGEMM in .peers (carry it):
#   bash lab/device_s49.sh            (SUITE_S, BI500_S override the limits)
# If the suite passes, the moved A box and the wide As window go on by default (dispatch/dense.py),
# then a retune: TUNE_ON=any TUNE_SHAPES=lab/shapes_partial_tiles.csv bash lab/device_s42.sh ...
export FP8GEMM_DENSE_A_BOX_SHIFT=1 FP8GEMM_DENSE_SFA_WIDE_WINDOW=1 FP8GEMM_DENSE_SHORT_SFA_BOX=1 FP8GEMM_DENSE_SKIP_IDLE_WG=1
SUITE_S=${SUITE_S:-420} UNSEEN_S=0 MODEL_S=0 BI500_S=${BI500_S:-150} bash "$(dirname "$0")/device_s42.sh"
