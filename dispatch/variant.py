"""What each kernel variant's host descriptor holds, and the shape it is chosen for.

A variant is one kernel file in kernels_cu/ (its stem is the compile cache key, the bench CSV row,
the table's ``variant`` and the test id). Its descriptor is a frozen dataclass whose fields are
that kernel's compile-time knobs, typed for it, and whose methods say everything else about it:

    is_valid(desc)           whether the kernel may run the shape with these knobs
    smem_bytes(out_dtype)    dynamic shared memory of a launch (pinned to the kernel's layout by
                             tests/test_kernels_compile.py)
    template_args(...)       the kernel template's arguments, in order
    plan(p, ldc, aligned)    the launch plan for a validated problem (fp8gemm/launcher.Plan)
    label()                  a short name (tuner state, bench notes)
    fallback(desc, num_sms)  (class) the variant's own choice for a shape
    tuner_candidates(...)    (class) what fp8gemm-tune times for a shape beside the fallback

Cost models sit with the variant that uses them (general.py holds the one the general, swap-AB
and grouped choices share); selector.py chooses among variants.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import ClassVar

from ..hw import SCALE_BLOCK

BLOCK_K = SCALE_BLOCK         # every kernel's K block: one scale per 128 K
DEFAULT_NUM_SMS = 132         # H100 SXM / H200; the launcher passes the device's own count


@dataclass(frozen=True)
class GemmDesc:
    m: int
    n: int
    k: int
    out_dtype: str = "bfloat16"

    def shape_ok(self) -> bool:
        """The rule every kernel shares: M, N >= 1, K a positive multiple of 16."""
        return self.m >= 1 and self.n >= 1 and self.k >= 16 and self.k % 16 == 0


@dataclass(frozen=True)
class Candidate:
    """The base of every variant's descriptor: ``variant`` (the kernel file stem) and the
    ``reason`` it was chosen (not part of its identity)."""

    variant: ClassVar[str] = ""
    reason: str = field(default="", compare=False, kw_only=True)

    def knobs(self) -> dict:
        """The compile-time knobs by name, as the table stores them."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "reason"}

    def key(self) -> tuple:
        return (self.variant,) + tuple(self.knobs().items())

    def describe(self) -> str:
        return " ".join([self.variant] + [f"{k}={v}" for k, v in self.knobs().items()])

    def is_valid(self, desc: GemmDesc) -> bool:
        raise NotImplementedError

    def smem_bytes(self, out_dtype: str = "bfloat16") -> int:
        raise NotImplementedError

    def plan(self, p, ldc: int, out_aligned: bool):
        raise NotImplementedError

    def label(self) -> str:
        raise NotImplementedError


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


FLAG = {True: "true", False: "false"}     # a bool template argument
