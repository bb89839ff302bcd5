"""The dispatcher: (M, N, K, out dtype) -> a kernel variant's descriptor with its knobs.

One module per variant (general.py: General and SwapAB, short_k.py, gemv.py, wg3.py, dense.py; grouped.py:
the grouped GEMMs' and the fused SwiGLU L1's choice), the shared base in variant.py, the choice
among them in selector.py. Planning a launch needs the package's launcher, but selection runs on
the CPU without CuPy, so it is tested there.
"""
from .dense import Dense
from .gemv import Gemv
from .general import General, SwapAB
from .selector import VARIANTS, explain, fallback, is_valid, select, variants
from .short_k import ShortK
from .variant import Candidate, GemmDesc
from .wg3 import Wg3

__all__ = ["VARIANTS", "Candidate", "Dense", "GemmDesc", "Gemv", "General", "ShortK", "SwapAB", "Wg3", "explain",
           "fallback", "is_valid", "select", "variants"]
