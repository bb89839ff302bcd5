"""fp8gemm's benchmark: ``fp8gemm-bench`` / ``python -m fp8gemm.bench`` (see cli.py)."""
