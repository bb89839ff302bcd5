"""Lab (issue 27): fp8gemm-bench with the general kernel's source patched per PATCH in this process
(lab/simple_loop.py's patches), so that two loop forms are timed against DeepGEMM in separate
processes on the same shapes. Usage: PATCH=oldlean,oldloads python lab/bench_patched.py BENCH-ARGS..."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import simple_loop  # noqa: E402,F401  (patches the general kernel's source per PATCH)

from fp8gemm.bench.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
