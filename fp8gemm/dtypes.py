"""The floating-point formats fp8gemm reads and writes, one table each side of the kernels.

``FLOAT_TYPES`` is the one place where a 16/32-bit float format's name, size, NumPy dtype and the
kernels' type id (kernels_cu/common/types.cuh, OutType; the quantizer's input types use the same
ids) are written; every other module takes what it needs from here.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class FloatType:
    name: str
    kernel_id: int            # OutType in kernels_cu/common/types.cuh
    itemsize: int
    numpy: np.dtype


FLOAT_TYPES = {t.name: t for t in (FloatType("bfloat16", 0, 2, np.dtype(ml_dtypes.bfloat16)),
                                   FloatType("float16", 1, 2, np.dtype(np.float16)),
                                   FloatType("float32", 2, 4, np.dtype(np.float32)))}
OUT_DTYPES = tuple(FLOAT_TYPES)                                   # what a GEMM may write
OUT_BYTES = {name: t.itemsize for name, t in FLOAT_TYPES.items()}
KERNEL_TYPE_IDS = {name: t.kernel_id for name, t in FLOAT_TYPES.items()}
FP8_DTYPES = ("float8_e4m3fn", "uint8", "int8")                   # what an FP8 operand may be
FP8_E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
BFLOAT16 = FLOAT_TYPES["bfloat16"].numpy

# The NumPy dtype of each buffer fp8gemm allocates (CuPy has no FP8 dtype: FP8 buffers are bytes).
NP_DTYPES = {**{name: t.numpy for name, t in FLOAT_TYPES.items()},
             "float8_e4m3fn": np.dtype(np.uint8), "int32": np.dtype(np.int32)}

# DeepSeek-V4's SwiGLU clamp: gate clamped above at the limit, up to [-limit, limit].
SWIGLU_LIMIT = 10.0
