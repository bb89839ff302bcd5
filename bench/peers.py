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

        self._set(torch.from_dlpack(case.a).view(torch.float8_e4m3fn),
                  torch.from_dlpack(case.b).view(torch.float8_e4m3fn),
                  torch.from_dlpack(case.a_scale), torch.from_dlpack(case.b_scale), out_dtype)

    def _set(self, a, b, sa, sb, out_dtype):
        import torch

        self.a, self.b, self.sa, self.sb = a, b, sa, sb
        self.m, self.k = self.a.shape
        self.n = self.b.shape[0]
        self.out_dtype = getattr(torch, out_dtype)

    @classmethod
    def zeros(cls, m: int, n: int, k: int, out_dtype: str = "bfloat16"):
        """Zero operands of this shape (for warming a peer's kernel cache: the data do not matter)."""
        import torch

        kb, nb = -(-k // 128), -(-n // 128)
        self = cls.__new__(cls)
        self._set(torch.zeros((m, k), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn),
                  torch.zeros((n, k), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn),
                  torch.ones((m, kb), dtype=torch.float32, device="cuda"),
                  torch.ones((nb, kb), dtype=torch.float32, device="cuda"), out_dtype)
        return self


def collect_calls(peers, prepare, x, check, sync=None):
    """Every peer call that runs on these inputs and passes ``check``.

    ``prepare[peer](x)`` gives {label: zero-argument callable} or a string saying why the peer
    cannot run the shape; ``check(result)`` gives None (correct) or a message. A peer whose
    prepare or call raises, or whose result fails the check, is left out and reported. Returns
    ({"peer:label": callable}, {peer: [labels]}, [notes]).
    """
    fns, choice, notes = {}, {}, []
    for peer in peers:
        try:
            prepared = prepare[peer](x)
        except Exception as exc:
            notes.append(f"{peer}: {type(exc).__name__} {_first_line(exc)}".strip())
            continue
        if isinstance(prepared, str):
            notes.append(f"{peer}: {prepared}")
            continue
        good = {}
        for label, fn in prepared.items():
            try:
                res = fn()
                if sync is not None:
                    sync()
            except Exception as exc:
                notes.append(f"{peer}/{label}: {type(exc).__name__} {_first_line(exc)}".strip())
                continue
            bad = check(res)
            if bad:
                notes.append(f"{peer}/{label}: {bad}")
                continue
            good[label] = fn
        if any(not lb.endswith("/plain") for lb in good):
            # the unpadded layout is a last resort: timed only when no padded one is right
            good = {lb: fn for lb, fn in good.items() if not lb.endswith("/plain")}
        if good:
            choice[peer] = list(good)
            for label, fn in good.items():
                fns[f"{peer}:{label}"] = fn
    return fns, choice, notes


def _first_line(exc) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:80] if text else ""


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
    sa = align(x.sa)          # the layout its quantizer writes: made here, outside the timing

    def call():
        deep_gemm.fp8_gemm_nt((x.a, sa), (x.b, x.sb), out, disable_ue8m0_cast=True)
        return out

    return {"fp8_gemm_nt": call}


PREPARE = {"cublaslt": prepare_cublaslt, "triton": prepare_triton, "deepgemm": prepare_deepgemm}


# --- DeepGEMM's grouped GEMMs (fp8gemm-bench --moe), each in its own preferred layout ----------------

def deepgemm_contiguous_layout(counts, align: int | None = None):
    """DeepGEMM's contiguous layout for groups of ``counts`` rows (numpy): every group's rows start
    at a multiple of ``align`` (default: what DeepGEMM asks for, 128 on SM90). Returns (padded row
    count, int64 position of each of our rows in it, int32 m_indices: the group of each padded row,
    -1 on padding)."""
    import numpy as np

    if align is None:
        import deep_gemm

        align = deep_gemm.get_mk_alignment_for_contiguous_layout()
    counts = np.asarray(counts, dtype=np.int64)
    padded = -(-counts // align) * align
    starts = np.concatenate([[0], np.cumsum(padded)[:-1]])
    pos = np.concatenate([s + np.arange(c) for s, c in zip(starts, counts)]) if counts.sum() else \
        np.zeros(0, np.int64)
    m_indices = np.full(int(padded.sum()), -1, dtype=np.int32)
    m_indices[pos] = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
    return int(padded.sum()), pos, m_indices


def prepare_deepgemm_contiguous(a, sa, b, sb, counts):
    """``m_grouped_fp8_gemm_nt_contiguous`` on our contiguous rows ``a`` [P, K] (torch FP8, groups
    in order with ``counts`` rows each): the rows are copied into its padded layout here, outside
    the timing. Returns (call, rows) where ``rows(result)`` gives the result in our row order."""
    import torch

    import deep_gemm

    total, pos, m_indices = deepgemm_contiguous_layout(counts)
    pos_d = torch.from_numpy(pos).to(a.device)
    a_pad = torch.zeros((total, a.shape[1]), dtype=torch.uint8, device=a.device).view(a.dtype)
    sa_pad = torch.ones((total, sa.shape[1]), dtype=torch.float32, device=a.device)
    a_pad[pos_d], sa_pad[pos_d] = a, sa
    sa_pad = deep_gemm.get_mn_major_tma_aligned_tensor(sa_pad)
    mi = torch.from_numpy(m_indices).to(a.device)
    out = torch.empty((total, b.shape[1]), dtype=torch.bfloat16, device=a.device)

    def call():
        deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a_pad, sa_pad), (b, sb), out, mi, disable_ue8m0_cast=True)
        return out

    return call, (lambda res: res[pos_d])


def prepare_deepgemm_masked(a, sa, b, sb, counts, expected_m: int):
    """``m_grouped_fp8_gemm_nt_masked`` on [G, max_m, K] rows (torch FP8), ``counts`` [G] int32 on
    the GPU; its A-scale layout made here, outside the timing."""
    import torch

    import deep_gemm

    sa_t = deep_gemm.get_mn_major_tma_aligned_tensor(sa)
    out = torch.empty((a.shape[0], a.shape[1], b.shape[1]), dtype=torch.bfloat16, device=a.device)

    def call():
        deep_gemm.m_grouped_fp8_gemm_nt_masked((a, sa_t), (b, sb), out, counts, expected_m,
                                               disable_ue8m0_cast=True)
        return out

    return call


def _zeros_fp8(shape):
    import torch

    return torch.zeros(shape, dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)


def _warm_gemm(job):
    import torch

    for fn in prepare_deepgemm(Inputs.zeros(job["m"], job["n"], job["k"])).values():
        fn()
    torch.cuda.synchronize()


_warm_weights = {}       # a warm-up worker's one set of zero weights, kept while its jobs share them


def _weights(g: int, n: int, k: int):
    import torch

    if (g, n, k) not in _warm_weights:
        _warm_weights.clear()
        torch.cuda.empty_cache()
        _warm_weights[(g, n, k)] = (_zeros_fp8((g, n, k)),
                                    torch.ones((g, -(-n // 128), -(-k // 128)), dtype=torch.float32, device="cuda"))
    return _warm_weights[(g, n, k)]


def grouped_job_bytes(job) -> int:
    """About the GPU memory one grouped warm-up job holds (weights, padded rows, output)."""
    g, n, k, rows = len(job["counts"]), job["n"], job["k"], sum(job["counts"])
    rows = g * job["max_m"] if "max_m" in job else rows + 128 * g
    return g * n * k + rows * (k + 2 * n + 4 * -(-k // 128))


def _warm_grouped(job):
    """One DeepGEMM grouped call of this job's shape on zeros (``counts``: rows per group)."""
    import torch

    counts, n, k = job["counts"], job["n"], job["k"]
    g, kb = len(counts), -(-k // 128)
    b, sb = _weights(g, n, k)
    if job["kind"] == "deepgemm_contiguous":
        rows = sum(counts)
        call, _ = prepare_deepgemm_contiguous(_zeros_fp8((rows, k)), torch.ones((rows, kb), device="cuda"),
                                              b, sb, counts)
    else:
        m = job["max_m"]
        cnt = torch.tensor(counts, dtype=torch.int32, device="cuda")
        call = prepare_deepgemm_masked(_zeros_fp8((g, m, k)), torch.ones((g, m, kb), device="cuda"), b, sb,
                                       cnt, job["expected_m"])
    call()
    torch.cuda.synchronize()


# kind -> builder for the bench's warm-up workers (bench/warm.py)
WARM_BUILDERS = {"deepgemm_gemm": _warm_gemm, "deepgemm_contiguous": _warm_grouped,
                 "deepgemm_masked": _warm_grouped}
