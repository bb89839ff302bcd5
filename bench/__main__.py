"""python -m fp8gemm.bench: the same as the fp8gemm-bench console script."""
import sys

from .cli import main

sys.exit(main())
