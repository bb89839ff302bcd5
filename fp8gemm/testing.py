"""Test and benchmark data: random FP8 operands with scales chosen so |C| is about 1, and exact
dyadic cases. Works on the GPU (cupy) or the host (numpy); the reference is fp8gemm.reference."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import reference

# Bytes whose |value| lies in [2^-3, 7.5]: sign bit free, exponent field 4..9 (bias 7), any mantissa.
MODERATE_BYTES = np.array([s | (e << 3) | m for s in (0, 0x80) for e in range(4, 10) for m in range(8)],
                          dtype=np.uint8)
MODERATE_MEAN_SQ = float(np.mean(reference.FP8_E4M3_DECODE[MODERATE_BYTES] ** 2))
# Dyadic bytes: 0, +-0.5, +-1, +-2 (exact products and sums in fp32).
DYADIC_BYTES = np.array([0x00, 0x30, 0xB0, 0x38, 0xB8, 0x40, 0xC0], dtype=np.uint8)


@dataclass
class Case:
    """One GEMM's inputs as uint8 bytes and float32 scales (cupy or numpy arrays)."""

    a: object        # [M, K] uint8
    b: object        # [N, K] uint8
    a_scale: object  # [M, ceil(K/128)] float32
    b_scale: object  # [ceil(N/128), ceil(K/128)] float32

    def reference(self, xp=np):
        """float64 C = (A * As) @ (B * Bs)^T."""
        return reference.matmul(self.a, self.b, self.a_scale, self.b_scale, xp=xp)

    def as_torch(self):
        """(a, b, a_scale, b_scale) as torch tensors sharing this case's GPU memory, A and B
        viewed as torch.float8_e4m3fn (for the device-side tools in tools/)."""
        import torch

        fp8 = torch.float8_e4m3fn
        return (torch.from_dlpack(self.a).view(fp8), torch.from_dlpack(self.b).view(fp8),
                torch.from_dlpack(self.a_scale), torch.from_dlpack(self.b_scale))


def random_case(m, n, k, seed=0, xp=None, dyadic=False) -> Case:
    """Random operands; ``xp`` is cupy (default) or numpy.

    Moderate case: |a|, |b| in [1/8, 7.5], scales at the level that makes |C| ~ 1, each varied by
    2^U(-1, 1) so that wrong scale indexing shows. Dyadic case: values in {0, +-1/2, +-1, +-2},
    scales 2^{-2..2}: every partial sum is exact in fp32.
    """
    if xp is None:
        import cupy as xp
    rng = np.random.default_rng(seed) if xp is np else xp.random.default_rng(seed)
    kb, nb = -(-k // 128), -(-n // 128)
    table = xp.asarray(DYADIC_BYTES if dyadic else MODERATE_BYTES)
    a = table[rng.integers(0, len(table), size=(m, k))]
    b = table[rng.integers(0, len(table), size=(n, k))]
    if dyadic:
        sa = (2.0 ** rng.integers(-2, 3, size=(m, kb))).astype(xp.float32)
        sb = (2.0 ** rng.integers(-2, 3, size=(nb, kb))).astype(xp.float32)
    else:
        # |C| ~ sqrt(K E[a^2] E[b^2]) * sa * sb
        level = (max(k, 1) * MODERATE_MEAN_SQ ** 2) ** -0.25
        sa = (level * 2.0 ** rng.uniform(-1, 1, size=(m, kb))).astype(xp.float32)
        sb = (level * 2.0 ** rng.uniform(-1, 1, size=(nb, kb))).astype(xp.float32)
    return Case(a, b, sa, sb)


def as_float64(x):
    """Any framework's GPU array (bf16 / fp16 / fp32) -> a cupy float64 array, for error metrics."""
    import cupy

    mod = type(x).__module__
    if mod.startswith("torch"):
        return cupy.from_dlpack(x.float().contiguous()).astype(cupy.float64)
    if mod.startswith(("jax", "jaxlib")):
        import jax.numpy as jnp

        return cupy.from_dlpack(jnp.asarray(x, dtype=jnp.float32)).astype(cupy.float64)
    if x.dtype.name == "bfloat16":   # widen the bits: exact, and independent of CuPy's bf16 support
        bits = x.view(cupy.uint16).astype(cupy.uint32) << 16
        return bits.view(cupy.float32).astype(cupy.float64)
    return x.astype(cupy.float64)
