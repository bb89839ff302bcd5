"""Launcher: a validated problem + a dispatcher candidate -> a launch plan -> one launch.

Stage 4 of matmul. A plan holds the compiled kernel (compiler.py), the tensor maps (tma.py), the
grid and a prebuilt argument block; ``plan.run(out_ptr, stream_ptr)`` fills in the output (and,
for split-K, the stream's workspace) and calls cuLaunchKernel (driver.py). SM counts and split-K
workspaces are cached here.
"""
from __future__ import annotations

import ctypes
import dataclasses
import struct
import threading

from . import compiler, driver, tma
from .dispatch.selector import SWIGLU_ACT_COLS
from .dtypes import KERNEL_TYPE_IDS as OUT_TYPE_IDS
from .dtypes import OUT_BYTES
from .hw import MAX_SMEM_PER_BLOCK
from .validate import GemmProblem, GroupedProblem

STORE_CHUNK_BYTES = 128        # one 128B-swizzle chunk of output columns per TMA store box
GENERAL_BLOCK_M = 128
GENERAL_THREADS = 384
MAX_GRID = 2**31 - 1

_lock = threading.Lock()
_sm_counts = {}
_workspaces = {}      # (device, stream) -> (float32 workspace, uint32 tile counters)


def sm_count(device: int) -> int:
    n = _sm_counts.get(device)
    if n is None:
        import cupy

        n = cupy.cuda.Device(device).attributes["MultiProcessorCount"]
        _sm_counts[device] = n
    return n


def split_workspace(device: int, stream_ptr: int, floats: int, tiles: int):
    """(workspace pointer, counters pointer) with room for ``floats`` partial sums and ``tiles``
    counters, private to one stream (concurrent launches on one stream are ordered).

    NOTES: counters must be zero before a launch; the kernel's last split resets its tile's
    counter, so zeroing happens once here, at allocation (then a device sync, so that a launch on
    another stream cannot overtake the memset).
    Under CUDA-graph capture neither the sync nor a plain allocation is allowed, and a memset
    would only run at replay: a captured launch gets its own workspace (allocated in relaxed
    capture mode, kept for the life of the process because the graph may replay at any time)
    whose counters a captured memset zeroes before every replay. Eager launches on the same
    stream never share it.
    """
    capturing = driver.stream_capturing(stream_ptr) if stream_ptr else False
    key = (device, stream_ptr, capturing)
    ws = _workspaces.get(key)
    if ws is None or ws[0].size < floats or ws[1].size < tiles:
        import cupy

        with _lock, cupy.cuda.Device(device):
            old = _workspaces.get(key)
            f = max(floats, old[0].size if old else 0)
            t = max(tiles, old[1].size if old else 0)
            if capturing:
                with driver.relaxed_capture():
                    ws = (cupy.empty(f, dtype=cupy.float32), cupy.empty(t, dtype=cupy.uint32))
                if old is not None:
                    _captured_retired.append(old)      # an earlier graph may still use it
            else:
                ws = (cupy.empty(f, dtype=cupy.float32), cupy.zeros(t, dtype=cupy.uint32))
                cupy.cuda.Device(device).synchronize()
            _workspaces[key] = ws
    if capturing:
        driver.memset_u32_async(ws[1].data.ptr, 0, ws[1].size, stream_ptr)
    return ws[0].data.ptr, ws[1].data.ptr


_captured_retired = []


class KernelParams:
    """A kernel's argument block: every argument in its own slot of one ctypes buffer (8-byte
    scalars and pointers, 128-byte tensor maps at 64-byte alignment) and the array of slot
    addresses cuLaunchKernel takes. Built once per plan; per call only the slots that change are
    rewritten (cuLaunchKernel copies the arguments before it returns, so the block is reusable)."""

    __slots__ = ("offsets", "buffer", "pointers", "address")

    def __init__(self, args):
        """``args``: a sequence of ("u64" | "i64" | "u32" | "f32" | "desc", value)."""
        blob, offsets = bytearray(), []
        for kind, value in args:
            if kind == "desc":
                blob.extend(b"\0" * (-len(blob) % 64))
                offsets.append(len(blob))
                blob.extend(bytes(value))
            else:
                offsets.append(len(blob))
                fmt = {"u64": "<Q", "i64": "<q", "u32": "<I", "f32": "<f"}[kind]
                blob.extend(struct.pack(fmt, value).ljust(8, b"\0"))
        self.offsets = tuple(offsets)
        self.buffer = ctypes.create_string_buffer(bytes(blob), len(blob))
        base = ctypes.addressof(self.buffer)
        self.pointers = (ctypes.c_void_p * len(offsets))(*(base + o for o in offsets))
        self.address = ctypes.addressof(self.pointers)      # what cuLaunchKernel takes

    def set_u64(self, index: int, value: int) -> None:
        struct.pack_into("<Q", self.buffer, self.offsets[index], value)

    def set_desc(self, index: int, desc) -> None:
        ctypes.memmove(ctypes.addressof(self.buffer) + self.offsets[index], bytes(desc), 128)


def tma_store_ok(n: int, block_n: int, esize: int, ldc: int, out_aligned: bool) -> bool:
    """Whether the epilogue may store C through TMA: a tile row is whole 128-byte swizzle chunks,
    C's base and row pitch are 16-byte aligned, and a row of C (N elements) ends on a 16-byte
    boundary. NOTES: the last condition because a TMA store clips a box at the tensor's inner
    extent only to 16-byte granularity: with N * esize % 16 != 0 it also wrote the elements from
    N up to the next 16-byte boundary, i.e. past the end of each row of an output view (found by
    the NaN-poisoned border test at N = 300 bf16, session 5; triton-lang/triton#11583 reports the
    same on H100)."""
    return ((block_n * esize) % STORE_CHUNK_BYTES == 0 and out_aligned and (ldc * esize) % 16 == 0
            and (n * esize) % 16 == 0)


def gemm_args(tmap_a, tmap_b, p: GemmProblem, ldc: int) -> tuple:
    """The arguments every GEMM kernel starts with, up to N: the tensor maps of A and B (the C map
    and the output pointer are filled in per call), the scales with their strides, ldc, M, N."""
    return (("desc", tmap_a), ("desc", tmap_b), ("desc", tma.ZERO_DESCRIPTOR),
            ("u64", p.sa_ptr), ("i64", p.sa_stride_m), ("i64", p.sa_stride_k),
            ("u64", p.sb_ptr), ("i64", p.sb_stride_n), ("i64", p.sb_stride_k),
            ("u64", 0), ("i64", ldc), ("u32", p.m), ("u32", p.n))


# The general kernel's trailing grouped-GEMM arguments (groups, num_groups, group_rows, sb_stride_g)
# when it runs ungrouped, and its last ones (act_scale, swiglu_limit) outside the fused SwiGLU L1.
NO_GROUPS = (("u64", 0), ("u32", 0), ("u32", 0), ("i64", 0))
NO_SWIGLU = (("u64", 0), ("f32", 0.0))

# Argument indices of sm90_fp8_gemm_general_kernel that change from call to call.
_ARG_TMAP_C, _ARG_OUT, _ARG_WORKSPACE, _ARG_COUNTERS = 2, 9, 15, 16


SWAP_AB_KERNEL = "sm90_fp8_gemm_swap_ab"     # the general candidate's swap_ab orientation


def general_kernel(p: GemmProblem, cand, tma_store: bool, grouped: bool, smem_bytes: int,
                   precise_fp32: bool = True, swiglu: bool = False):
    """The instantiation of a general candidate for a problem: sm90_fp8_gemm_general, or under
    swap_ab sm90_fp8_gemm_swap_ab (same argument list). FP32 output promotes after every wgmma
    (kFinePromotion) unless ``precise_fp32`` is False. ``swiglu``: the fused MoE L1 (template
    kSwiGLU, named only when set)."""
    flag = {True: "true", False: "false"}
    fine = p.out_dtype == "float32" and precise_fp32 and not swiglu
    head = (cand.block_n, cand.stages, OUT_TYPE_IDS[p.out_dtype], cand.group_m, flag[fine])
    if cand.swap_ab:
        assert not (tma_store or swiglu), "swap-AB tiles are C^T: they store directly"
        return compiler.get_kernel(p.device, SWAP_AB_KERNEL, head + (flag[grouped],), smem_bytes)
    args = head + (flag[tma_store], flag[grouped]) + (("true",) if swiglu else ())
    return compiler.get_kernel(p.device, cand.variant, args, smem_bytes)


class GeneralPlan:
    """Everything about one launch of sm90_fp8_gemm_general that does not depend on the output
    pointer or the stream, computed once per problem (api.py caches plans per input signature).

    FP32 output promotes after every wgmma (kFinePromotion): the tensor cores' FP8 accumulation
    error (~2e-4) would otherwise exceed FP32's 1e-4 tolerance. The epilogue stores through TMA
    (kTmaStore) when tma_store_ok: C's base and row pitch 16-byte aligned, its rows ending on a
    16-byte boundary, a tile row whole 128-byte chunks; otherwise it stores from registers.
    Swap-AB runs sm90_fp8_gemm_swap_ab on C^T = B A^T (weights 128 rows a tile, tokens block_n).
    """

    def __init__(self, p: GemmProblem, cand, smem_bytes: int, ldc: int, out_aligned: bool):
        esize = OUT_BYTES[p.out_dtype]
        self.tma_store = not cand.swap_ab and tma_store_ok(p.n, cand.block_n, esize, ldc, out_aligned)
        kern = general_kernel(p, cand, self.tma_store, False, smem_bytes)
        # Tile space rows x cols: C (M x N), or C^T (N x M) under swap-AB, whose wgmma A is B.
        if cand.swap_ab:
            rows, cols = p.n, p.m
            tmap_a = tma.encode_2d_fp8(p.b_ptr, p.n, p.k, p.ldb, GENERAL_BLOCK_M)
            tmap_b = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda, cand.block_n)
        else:
            rows, cols = p.m, p.n
            tmap_a = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda, GENERAL_BLOCK_M)
            tmap_b = tma.encode_2d_fp8(p.b_ptr, p.n, p.k, p.ldb, cand.block_n)
        self.num_tiles = -(-rows // GENERAL_BLOCK_M) * -(-cols // cand.block_n)
        self.splits = max(1, min(cand.splits, -(-p.k // 128)))
        units = self.num_tiles * self.splits
        if units > MAX_GRID:
            raise ValueError(f"M = {p.m}, N = {p.n} needs {units} work units, over the limit {MAX_GRID}")
        self.ws_floats = units * GENERAL_BLOCK_M * cand.block_n
        self._finish(p, kern, min(units, sm_count(p.device)), GENERAL_THREADS, smem_bytes, ldc, esize,
                     gemm_args(tmap_a, tmap_b, p, ldc) + (
                         ("u32", p.k), ("u32", self.splits), ("u64", 0), ("u64", 0)) + NO_GROUPS + NO_SWIGLU)

    def _finish(self, p: GemmProblem, kern, grid: int, threads: int, smem_bytes: int, ldc: int, esize: int,
                args: tuple) -> None:
        """What every plan holds for ``run``: the prebuilt launch and argument block, and the
        output geometry for the per-call C tensor map."""
        self.grid = grid
        self.smem_bytes = smem_bytes
        self.function = kern.kernel.ptr
        self.launch_prefix = driver.launch_args(self.function, grid, threads, smem_bytes)
        self._ws = (0, 0)             # the workspace the argument block holds
        self.device, self.m, self.n, self.ldc, self.esize = p.device, p.m, p.n, ldc, esize
        self.params = KernelParams(args)
        self._lock = threading.Lock()
        self._out_ptr = None          # the output pointer the argument block holds

    def run(self, out_ptr: int, stream_ptr: int) -> None:
        """Launch on ``stream_ptr`` writing C at ``out_ptr`` (row pitch as planned)."""
        ws = counters = 0
        if self.splits > 1:
            ws, counters = split_workspace(self.device, stream_ptr, self.ws_floats, self.num_tiles)
        with self._lock:              # one argument block per plan
            params = self.params
            # NOTES: a caller that drops each result gets the same block back from its pool, so
            # the output's slot and tensor map usually hold already (host overhead, issue 6).
            if out_ptr != self._out_ptr:
                params.set_u64(_ARG_OUT, out_ptr)
                if self.tma_store:
                    params.set_desc(_ARG_TMAP_C, tma.encode_2d(
                        out_ptr, self.m, self.n, self.ldc * self.esize, 64,
                        STORE_CHUNK_BYTES // self.esize, self.esize))
                self._out_ptr = out_ptr
            if ws and (ws, counters) != self._ws:
                params.set_u64(_ARG_WORKSPACE, ws)
                params.set_u64(_ARG_COUNTERS, counters)
                self._ws = (ws, counters)
            launch(self.device, self.launch_prefix, stream_ptr, params.address)


_get_device_fn = None


def _get_device() -> int:
    """The calling thread's current CUDA device (CuPy's Cython getDevice, looked up once)."""
    global _get_device_fn
    if _get_device_fn is None:
        import cupy

        _get_device_fn = cupy.cuda.runtime.getDevice
    return _get_device_fn()


def launch(device: int, prefix: tuple, stream_ptr: int, params: int) -> None:
    """Launch a prebuilt kernel (driver.launch_args) on ``device``. The common case -- the caller's
    device current, its context bound -- costs one cuLaunchKernel; a thread without a bound
    context gets the device's primary context bound and the launch retried; another current
    device is switched to and back."""
    if _get_device() == device:
        rc = driver.launch_prebuilt(prefix, stream_ptr, params)
        if rc == driver.CUDA_ERROR_INVALID_CONTEXT:
            import cupy

            cupy.cuda.runtime.setDevice(device)          # binds the primary context
            rc = driver.launch_prebuilt(prefix, stream_ptr, params)
    else:
        with current_device(device):
            rc = driver.launch_prebuilt(prefix, stream_ptr, params)
    if rc != 0:
        driver.check_launch(rc, prefix[1], prefix[4], prefix[7])


class current_device:
    """Make ``device`` current (its primary context bound to this thread) for a launch, and put
    the caller's device back afterwards if it differed."""

    __slots__ = ("device", "previous")

    def __init__(self, device: int):
        self.device = device
        self.previous = None

    def __enter__(self):
        import cupy

        cur = cupy.cuda.runtime.getDevice()
        if cur != self.device:
            self.previous = cur
            cupy.cuda.runtime.setDevice(self.device)
        elif not driver.has_context():
            cupy.cuda.runtime.setDevice(self.device)    # binds the primary context
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            import cupy

            cupy.cuda.runtime.setDevice(self.previous)
        return False


def plan(p: GemmProblem, cand, smem_bytes: int, ldc: int, out_aligned: bool):
    """A launch plan. Compiling and loading a kernel may happen inside a CUDA-graph capture (a
    first call there): relaxed capture mode lets this thread load the module meanwhile."""
    with current_device(p.device), driver.relaxed_capture():
        return PLANNERS[cand.variant](p, cand, smem_bytes, ldc, out_aligned)


class ShortKPlan(GeneralPlan):
    """A launch of sm90_fp8_gemm_short_k (K <= 256): one CTA per block_m x block_n tile of C,
    block_m / 64 warpgroups, both K blocks loaded at once. Same argument block as the general
    kernel up to ``N`` (no splits, no workspace), so ``run`` is shared."""

    def __init__(self, p: GemmProblem, cand, smem_bytes: int, ldc: int, out_aligned: bool):
        esize = OUT_BYTES[p.out_dtype]
        self.tma_store = tma_store_ok(p.n, cand.block_n, esize, ldc, out_aligned)
        k_blocks = -(-p.k // 128)
        kern = compiler.get_kernel(p.device, cand.variant,
                                   (cand.block_m, cand.block_n, k_blocks, OUT_TYPE_IDS[p.out_dtype],
                                    "true" if p.out_dtype == "float32" else "false",
                                    "true" if self.tma_store else "false"),
                                   smem_bytes)
        tmap_a = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda, cand.block_m)
        tmap_b = tma.encode_2d_fp8(p.b_ptr, p.n, p.k, p.ldb, cand.block_n)
        self.num_tiles = -(-p.m // cand.block_m) * -(-p.n // cand.block_n)
        if self.num_tiles > MAX_GRID:
            raise ValueError(f"M = {p.m}, N = {p.n} needs {self.num_tiles} tiles, over the limit {MAX_GRID}")
        self.splits = 1
        self._finish(p, kern, self.num_tiles, cand.block_m // 64 * 128, smem_bytes, ldc, esize,
                     gemm_args(tmap_a, tmap_b, p, ldc))


class GroupedPlan(GeneralPlan):
    """A launch of sm90_fp8_gemm_general in its grouped mode (MoE; kernel template kGrouped): A and
    C are all groups' rows, B the groups' weights stacked as [G * N, K]. The kernel reads the
    offsets or counts on the device, so the plan holds only bounds: a grid of at most one CTA per
    SM over the most tiles the groups can have, and a split-K workspace for that many. Swap-AB
    (decode): weight rows on the 128-row side of a tile, each group's tokens on block_n columns."""

    def __init__(self, gp: GroupedProblem, cand, smem_bytes: int, ldc: int, out_aligned: bool,
                 precise_fp32: bool = True):
        p = gp.gemm
        esize = OUT_BYTES[p.out_dtype]
        self.tma_store = not cand.swap_ab and tma_store_ok(p.n, cand.block_n, esize, ldc, out_aligned)
        # NOTES: compiled for the most shared memory a CTA may have: the tile prefix grows with G,
        # and one instantiation serves every G.
        kern = general_kernel(p, cand, self.tma_store, True, MAX_SMEM_PER_BLOCK, precise_fp32)
        g = gp.num_groups
        weights = tma.encode_2d_fp8(p.b_ptr, g * p.n, p.k, p.ldb,
                                    GENERAL_BLOCK_M if cand.swap_ab else cand.block_n)
        tokens = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda, cand.block_n if cand.swap_ab else GENERAL_BLOCK_M)
        tmap_a, tmap_b = (weights, tokens) if cand.swap_ab else (tokens, weights)
        token_tile = cand.block_n if cand.swap_ab else GENERAL_BLOCK_M
        if gp.group_rows:
            token_tiles = g * -(-gp.group_rows // token_tile)
        else:              # each non-empty group may end in a partial tile
            token_tiles = p.m // token_tile + min(g, p.m)
        self.num_tiles = token_tiles * -(-p.n // (GENERAL_BLOCK_M if cand.swap_ab else cand.block_n))
        self.splits = max(1, min(cand.splits, -(-p.k // 128)))
        self.ws_floats = self.num_tiles * self.splits * GENERAL_BLOCK_M * cand.block_n
        self._finish(p, kern, min(self.num_tiles * self.splits, sm_count(p.device)), GENERAL_THREADS, smem_bytes,
                     ldc, esize, gemm_args(tmap_a, tmap_b, p, ldc) + (
                         ("u32", p.k), ("u32", self.splits), ("u64", 0), ("u64", 0),
                         ("u64", gp.groups_ptr), ("u32", g), ("u32", gp.group_rows), ("i64", gp.sb_stride_g))
                     + NO_SWIGLU)


class SwiGLUPlan(GeneralPlan):
    """fp8gemm.moe's fused L1 (kernel template kSwiGLU): the contiguous grouped GEMM of ``gp``
    (A = the pairs' rows [P, H], B = w1 [G, 2I, H], gate rows then up rows) whose epilogue writes
    act = SwiGLU(h) in FP8 [P, I] (``run``'s output pointer, row pitch I bytes) and its scales
    [P, I / 128] at ``act_scale_ptr``, instead of h. Tiles: 128 rows x 128 act columns, each run
    as two sub-tiles of 64 gate + 64 up weight rows (B boxes of 64 rows)."""

    def __init__(self, gp: GroupedProblem, cand, act_scale_ptr: int, limit: float):
        p = gp.gemm
        inter = p.n // 2
        self.tma_store = False
        kern = general_kernel(p, cand, False, True, MAX_SMEM_PER_BLOCK, False, swiglu=True)
        g = gp.num_groups
        tmap_a = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda, GENERAL_BLOCK_M)
        tmap_b = tma.encode_2d_fp8(p.b_ptr, g * p.n, p.k, p.ldb, SWIGLU_ACT_COLS)
        act = dataclasses.replace(p, n=inter)               # the kernel's N: act columns
        self.num_tiles = (p.m // GENERAL_BLOCK_M + min(g, p.m)) * (inter // 128)
        self.splits, self.ws_floats = 1, 0
        self._finish(act, kern, min(self.num_tiles, sm_count(p.device)), GENERAL_THREADS, MAX_SMEM_PER_BLOCK,
                     inter, 1, gemm_args(tmap_a, tmap_b, act, inter) + (
                         ("u32", p.k), ("u32", 1), ("u64", 0), ("u64", 0),
                         ("u64", gp.groups_ptr), ("u32", g), ("u32", 0), ("i64", gp.sb_stride_g),
                         ("u64", act_scale_ptr), ("f32", limit)))


def plan_grouped(gp: GroupedProblem, cand, smem_bytes: int, ldc: int, out_aligned: bool,
                 precise_fp32: bool = True) -> GeneralPlan:
    with current_device(gp.gemm.device), driver.relaxed_capture():
        if cand.variant == "sm90_fp8_gemm_wg3":
            return Wg3Plan(gp.gemm, cand, smem_bytes, ldc, out_aligned, gp)
        return GroupedPlan(gp, cand, smem_bytes, ldc, out_aligned, precise_fp32)


def plan_swiglu(gp: GroupedProblem, cand, act_scale_ptr: int, limit: float) -> SwiGLUPlan:
    with current_device(gp.gemm.device), driver.relaxed_capture():
        return SwiGLUPlan(gp, cand, act_scale_ptr, limit)


class GemvPlan(GeneralPlan):
    """A launch of sm90_fp8_gemm_gemv (decode, M <= 16): one CTA of group_m warps per 16 weight
    rows, plain loads (no tensor maps: the argument block's maps stay zero), no workspace. The
    argument block starts as every GEMM kernel's, so ``run`` is shared."""

    def __init__(self, p: GemmProblem, cand, smem_bytes: int, ldc: int, out_aligned: bool):
        esize = OUT_BYTES[p.out_dtype]
        self.tma_store = False
        kern = compiler.get_kernel(p.device, cand.variant,
                                   (cand.block_n // 8, cand.group_m, cand.stages, OUT_TYPE_IDS[p.out_dtype]), 0)
        self.num_tiles = -(-p.n // cand.block_m)
        if self.num_tiles > MAX_GRID:
            raise ValueError(f"N = {p.n} needs {self.num_tiles} CTAs, over the limit {MAX_GRID}")
        self.splits = 1
        self._finish(p, kern, self.num_tiles, 32 * cand.group_m, 0, ldc, esize,
                     gemm_args(tma.ZERO_DESCRIPTOR, tma.ZERO_DESCRIPTOR, p, ldc) + (
                         ("u64", p.a_ptr), ("i64", p.lda), ("u64", p.b_ptr), ("i64", p.ldb), ("u32", p.k)))


class Wg3Plan(GeneralPlan):
    """sm90_fp8_gemm_wg3 (v16), the plain general kernel with three consumer warpgroups (192-row
    tiles, 512 threads, no split, bf16 / fp16 out). With ``gp``: its grouped mode (MoE prefill at
    129-192 rows per group; fp32 out with per-block promotion when the caller allows it), direct
    stores; the plan holds only bounds, as GroupedPlan."""

    def __init__(self, p: GemmProblem, cand, smem_bytes: int, ldc: int, out_aligned: bool,
                 gp: GroupedProblem | None = None):
        esize = OUT_BYTES[p.out_dtype]
        grouped = gp is not None
        g = gp.num_groups if grouped else 1
        self.tma_store = not grouped and tma_store_ok(p.n, cand.block_n, esize, ldc, out_aligned)
        args = (cand.block_n, cand.stages, OUT_TYPE_IDS[p.out_dtype], cand.group_m, "true" if self.tma_store else "false")
        kern = compiler.get_kernel(p.device, cand.variant, args + (("true",) if grouped else ()),
                                   MAX_SMEM_PER_BLOCK if grouped else smem_bytes)
        tmap_a = tma.encode_2d_fp8(p.a_ptr, p.m, p.k, p.lda, cand.block_m)
        tmap_b = tma.encode_2d_fp8(p.b_ptr, g * p.n, p.k, p.ldb, cand.block_n)
        if grouped and gp.group_rows:
            token_tiles = g * -(-gp.group_rows // cand.block_m)
        elif grouped:
            token_tiles = p.m // cand.block_m + min(g, p.m)
        else:
            token_tiles = -(-p.m // cand.block_m)
        self.num_tiles = token_tiles * -(-p.n // cand.block_n)
        self.splits = 1
        groups = ((("u64", gp.groups_ptr), ("u32", g), ("u32", gp.group_rows), ("i64", gp.sb_stride_g))
                  if grouped else NO_GROUPS)
        self._finish(p, kern, min(self.num_tiles, sm_count(p.device)), 512, smem_bytes, ldc, esize,
                     gemm_args(tmap_a, tmap_b, p, ldc) + (("u32", p.k),) + groups)


PLANNERS = {"sm90_fp8_gemm_general": GeneralPlan, "sm90_fp8_gemm_short_k": ShortKPlan,
            "sm90_fp8_gemm_gemv": GemvPlan, "sm90_fp8_gemm_wg3": Wg3Plan}
