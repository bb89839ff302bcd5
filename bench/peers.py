"""Peers timed beside fp8gemm in the same run: cuBLASLt block scaling (through torch),
the Triton block-FP8 kernel (our copy, best of a few configs) and DeepGEMM (where installed).

Each peer's ``prepare(inputs)`` returns {label: zero-argument callable} or a status string saying
why it cannot run the shape. Layout conversions a peer needs happen in prepare, outside timing.
"""
from __future__ import annotations

PEERS = ("cublaslt", "triton", "deepgemm")


def available(name: str) -> str | None:
    """None when the peer can run here, else the reason it cannot."""
    try:
        if name == "cublaslt":
            import torch  # noqa: F401
        elif name == "triton":
            import triton  # noqa: F401
        elif name == "deepgemm":
            import deep_gemm  # noqa: F401
        else:
            return f"unknown peer {name!r}"
    except Exception as exc:  # ImportError or a broken install
        return f"not importable ({type(exc).__name__})"
    return None


class Inputs:
    """One shape's operands as torch tensors (views of the CuPy test data)."""

    def __init__(self, case, out_dtype: str):
        import torch

        self.a = torch.from_dlpack(case.a).view(torch.float8_e4m3fn)
        self.b = torch.from_dlpack(case.b).view(torch.float8_e4m3fn)
        self.sa = torch.from_dlpack(case.a_scale)
        self.sb = torch.from_dlpack(case.b_scale)
        self.m, self.k = self.a.shape
        self.n = self.b.shape[0]
        self.out_dtype = getattr(torch, out_dtype)


def prepare_cublaslt(x: Inputs):
    """torch scaled_mm with BlockWise1x128 (A) x BlockWise128x128 (B).

    Both torch entry points (F.scaled_mm and torch._scaled_mm) with several scale layouts: B's
    K/128 dimension padded to a multiple of 4 in the stride, then in the shape (zero scales past
    K/128, which F.scaled_mm asks for at K = 256), then unpadded. The bench checks each, times
    every correct one and reports the fastest (the unpadded layout only when no padded one works).
    A scales are M-major.
    """
    import torch
    import torch.nn.functional as F

    if x.m % 4:
        return "M not a multiple of 4 (refused by torch)"
    kb, nb = x.sa.shape[1], x.sb.shape[0]
    sa = x.sa.t().contiguous().t()                                   # [M, Kb], strides (1, M)
    kb_pad = -(-kb // 4) * 4
    sb_store = torch.zeros((nb, kb_pad), dtype=torch.float32, device=x.sb.device)
    sb_store[:, :kb] = x.sb
    sb_padded = sb_store[:, :kb].t()                                 # [Kb, Nb], strides (1, Kb_pad)
    sb_plain = x.sb.t()                                              # [Kb, Nb], strides (1, Kb)
    sb_padded_shape = sb_store.t()                                   # [Kb_pad, Nb], zero rows past Kb
    bt = x.b.t()
    calls = {}
    recipe = getattr(F, "ScalingType", None)
    r1x128 = getattr(recipe, "Blockwise_1x128", None) or getattr(recipe, "BlockWise1x128", None)
    r128 = getattr(recipe, "Blockwise_128x128", None) or getattr(recipe, "BlockWise128x128", None)
    for label, sb in (("padded", sb_padded), ("padded-shape", sb_padded_shape), ("plain", sb_plain)):
        if r1x128 is not None and r128 is not None and hasattr(F, "scaled_mm"):
            def call(sb=sb):
                return F.scaled_mm(x.a, bt, scale_a=sa, scale_recipe_a=r1x128, scale_b=sb,
                                   scale_recipe_b=r128, output_dtype=x.out_dtype)
            calls[f"F.scaled_mm/{label}"] = call

        def call_old(sb=sb):
            return torch._scaled_mm(x.a, bt, sa, sb, out_dtype=x.out_dtype)
        calls[f"_scaled_mm/{label}"] = call_old
    return calls


def prepare_triton(x: Inputs):
    import torch

    from .triton_peer import CONFIGS, make_call

    out = torch.empty((x.m, x.n), dtype=x.out_dtype, device=x.a.device)
    return {f"cfg{c[0]}x{c[1]}w{c[3]}s{c[4]}": make_call(x.a, x.b, x.sa, x.sb, out, c) for c in CONFIGS}


def prepare_deepgemm(x: Inputs):
    import torch
    import deep_gemm

    if x.out_dtype != torch.bfloat16:
        return "bf16 output only"
    out = torch.empty((x.m, x.n), dtype=torch.bfloat16, device=x.a.device)
    align = getattr(deep_gemm, "get_mn_major_tma_aligned_tensor", None) or \
        getattr(deep_gemm, "get_col_major_tma_aligned_tensor")
    sa = align(x.sa)

    def call():
        deep_gemm.fp8_gemm_nt((x.a, sa), (x.b, x.sb), out)
        return out

    return {"fp8_gemm_nt": call}


PREPARE = {"cublaslt": prepare_cublaslt, "triton": prepare_triton, "deepgemm": prepare_deepgemm}
