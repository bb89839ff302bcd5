"""The dispatcher: (M, N, K, out dtype) -> kernel variant + meta-parameters.

Importable without CuPy, so it is tested on the CPU. See selector.py.
"""
from .selector import Candidate, GemmDesc, explain, is_valid, select, variants
from .selector import smem_bytes as smem_bytes_of

__all__ = ["Candidate", "GemmDesc", "explain", "is_valid", "select", "smem_bytes_of", "variants"]
