# Sourced by lab/device_*.sh (OUT set, DeepGEMM built): ab_knob VAR SHAPES ITERS times
# lab/bench_chunk.py over SHAPES with VAR=off, then VAR=on, each in its own process with DeepGEMM
# (b_off / b_on .csv and .log under $OUT; EACH_S limits each run), then compares them
# (lab/ab_pair.py: time / DeepGEMM's, on over off).
ab_knob() {
  local var=$1 shapes=$2 iters=$3 t
  for t in off on; do
    env "$var=$t" timeout "${EACH_S:-100}" python3 lab/bench_chunk.py --shapes "$shapes" --peers deepgemm \
      --iters "$iters" --warm-workers 12 --csv "$OUT/b_$t.csv" > "$OUT/b_$t.log" 2>&1
    echo "$t rc=$?"; grep -m3 -iE "error|assert|mismatch" "$OUT/b_$t.log"
  done
  python3 lab/ab_pair.py "$OUT/b_off.csv" "$OUT/b_on.csv" off on
}
