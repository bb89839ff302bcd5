#!/usr/bin/env bash
# One device call for issue 29's two ncu questions on the MoE layer (lab/profile_moe.py): does each
# grouped GEMM read every active expert's weights from DRAM about once (dram__bytes_read against
# the ideal), and which of the layer's kernels have shared-memory bank conflicts (conflicts /
# wavefronts of shared loads and stores). Prefill (8192 tokens) and decode (1 token), both models,
# uniform and skewed routing, the chain and the fused L1. Tables to stdout, raw CSVs under $OUT.
export PYTHONUNBUFFERED=1 CUPY_CACHE_DIR=${CUPY_CACHE_DIR:-/tmp/cupy_cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
M=$M,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
M=$M,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum
i=0
for run in "flash 8192 uniform" "flash 8192 uniform fused" "flash 8192 skewed" "pro 8192 uniform" \
           "flash 1 uniform" "flash 1024 uniform"; do
  i=$((i + 1))
  python3 lab/profile_moe.py $run > "$OUT/warm_$i.log" 2>&1      # compiles outside ncu
  timeout 150 ncu --nvtx --nvtx-include "prof/" --metrics "$M" --csv --page raw \
    python3 lab/profile_moe.py $run > "$OUT/ncu_$i.csv" 2> "$OUT/ncu_$i.err"
  echo "== $run (rc=$?)"
  python3 lab/moe_ncu_table.py "$OUT/ncu_$i.csv" "$OUT/ncu_$i.csv"
done
