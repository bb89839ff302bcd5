"""Lab (issue 27): fp8gemm-bench with the chunked K loop off (CHUNK=off: chunk_blocks returns 0,
the rolled loops as before) or as the dispatcher picks it, so that the two are timed against
DeepGEMM in separate processes on the same shapes. Usage: CHUNK=off python lab/bench_chunk.py BENCH-ARGS..."""
import os
import sys

from fp8gemm.bench.cli import main
from fp8gemm.dispatch import general

if os.environ.get("CHUNK") == "off":
    general.chunk_blocks = lambda *args: 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
