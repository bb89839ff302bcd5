#!/usr/bin/env bash
# Session 51's plan for the next two calls (no machine was lent after its first call). Run from a
# clean copy of the commit with DeepGEMM in .peers (carry it):
#   PART=A bash lab/device_s51.sh   the retune of the band 64 < M <= 1024 (108 trace shapes: the moved A
#       box and the wide As window now on by default, the 64 x 64 two-accumulator 13-stage candidate
#       since session 49; the rest of the table kept), then the whole GPU suite on that table (the
#       precompile test's cache fix and the plan's one As window first run here). ~590 s.
#   PART=B TABLE_IN=<A's table> bash lab/device_s51.sh   issue 57's mode beside the default and
#       DeepGEMM over the whole trace (issue 55's default / DeepGEMM from the same run). ~380 s.
case "${PART:-A}" in
  A) TUNE_ON=any TUNE_SHAPES=lab/shapes_band_65_1024.csv TUNE_S=${TUNE_S:-180} SUITE_S=${SUITE_S:-390} \
       UNSEEN_S=0 MODEL_S=0 TRACE_S=0 bash "$(dirname "$0")/device_s42.sh" ;;
  B) [ -n "$TABLE_IN" ] && export FP8GEMM_TABLE="$TABLE_IN"
     SUITE_S=0 UNSEEN_S=0 MODEL_S=0 TRACE_S=0 BITRACE_S=${BITRACE_S:-260} bash "$(dirname "$0")/device_s42.sh" ;;
esac
