"""Lab (issue 27): fp8gemm-bench with one dispatcher choice switched off, so that the two forms are
timed against DeepGEMM in separate processes on the same shapes. CHUNK=off: the chunked K loop
off (chunk_blocks returns 0: the rolled loops). NARROW=off: the narrow tiles' unswizzled TMA
store off (tiles of 8-32 bf16 columns store directly, as before NarrowStaging).
Usage: CHUNK=off python lab/bench_chunk.py BENCH-ARGS...   (or NARROW=off)"""
import os
import sys

from fp8gemm import launcher
from fp8gemm.bench.cli import main
from fp8gemm.dispatch import general

if os.environ.get("CHUNK") == "off":
    general.chunk_blocks = lambda *args: 0
if os.environ.get("NARROW") == "off":
    launcher.NARROW_ROW_BYTES = general.NARROW_ROW_BYTES = ()

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
