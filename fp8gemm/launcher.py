"""Launcher: the machinery every launch plan shares, and the launch itself.

Stage 4 of matmul. Each kernel variant builds its ``Plan`` (dispatch/: the compiled kernel from
compiler.py, the tensor maps from tma.py, the grid and a prebuilt argument block, inside
``building``); ``plan.run(out_ptr, stream_ptr)`` fills in the output (and, for split-K, the
stream's workspace) and calls cuLaunchKernel (driver.py). SM counts and split-K workspaces are
cached here.
"""
from __future__ import annotations

import contextlib
import ctypes
import struct
import threading

from . import driver, tma
from .dtypes import OUT_BYTES
from .validate import GemmProblem, GroupedProblem

STORE_CHUNK_BYTES = 128        # one 128B-swizzle chunk of output columns per TMA store box
NARROW_ROW_BYTES = (16, 32, 64)  # tile rows the general kernel stores as one unswizzled box (NarrowStaging)
MAX_GRID = 2**31 - 1

_lock = threading.Lock()
_sm_counts = {}
_workspaces = {}      # (device, stream) -> (float32 workspace, uint32 tile counters)


_gpu_keys = {}


def gpu_key(device: int) -> str:
    """The device's dispatch-table name (dispatch/selector.py: gpu_key), e.g. 'h200'."""
    key = _gpu_keys.get(device)
    if key is None:
        import cupy

        from .hw import gpu_key as key_of
        name = cupy.cuda.runtime.getDeviceProperties(device)["name"]
        key = _gpu_keys[device] = key_of(name.decode() if isinstance(name, bytes) else str(name))
    return key


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


def tma_store_ok(n: int, block_n: int, esize: int, ldc: int, out_aligned: bool, narrow: bool = False,
                 chunk: int = STORE_CHUNK_BYTES) -> bool:
    """Whether the epilogue may store C through TMA: a tile row is whole 128-byte swizzle chunks
    (or, where the kernel has the unswizzled staging, ``narrow``: NARROW_ROW_BYTES), C's base and
    row pitch are 16-byte aligned, and a row of C (N elements) ends on a 16-byte boundary. NOTES: the last condition because a TMA store clips a box at the tensor's inner
    extent only to 16-byte granularity: with N * esize % 16 != 0 it also wrote the elements from
    N up to the next 16-byte boundary, i.e. past the end of each row of an output view (found by
    the NaN-poisoned border test at N = 300 bf16; triton-lang/triton#11583 reports the
    same on H100). ``chunk``: the staging's chunk row bytes (128, or 64 for a kernel with the 64B-swizzled
    staging: the dense kernel's 96-column bf16 tiles)."""
    row = block_n * esize
    return ((row % chunk == 0 or (narrow and row in NARROW_ROW_BYTES)) and out_aligned
            and (ldc * esize) % 16 == 0 and (n * esize) % 16 == 0)


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

# Argument indices that change from call to call: the C tensor map and the output pointer (every
# GEMM kernel, gemm_args), the split-K workspace and counters (the general and swap-AB kernels).
_ARG_TMAP_C, _ARG_OUT, _ARG_WORKSPACE, _ARG_COUNTERS = 2, 9, 15, 16


def check_grid(units: int, what: str) -> None:
    if units > MAX_GRID:
        raise ValueError(f"{what} needs {units} work units, over the limit {MAX_GRID}")


# The persistent kernels' tile scheduler decodes unit indices by float reciprocals, exact below
# 2**21 (kernels_cu/scheduler.cuh kExactDivLimit): 2**21 tiles of even the narrowest tile (64 x 8)
# are an output of 2**30 elements.
MAX_SCHEDULED_UNITS = 2**21 - 1


def check_units(units: int, what: str) -> None:
    """Refuse a plan of the tile-scheduled kernels (general, swap-AB, wg3, dense) over more work
    units than the scheduler decodes exactly (a bound for the grouped modes: their most tiles)."""
    if units > MAX_SCHEDULED_UNITS:
        raise ValueError(f"{what} needs {units} work units with this tile; the persistent kernels' scheduler "
                         f"takes at most {MAX_SCHEDULED_UNITS} (force a wider tile or split the call)")


def token_tiles(rows: int, tile: int, gp: GroupedProblem | None) -> int:
    """The most row tiles of ``tile`` rows that ``rows`` token rows can take: plain, masked (each
    group its own max_rows), or contiguous (each non-empty group may end in a partial tile)."""
    if gp is None:
        return -(-rows // tile)
    if gp.group_rows:
        return gp.num_groups * -(-gp.group_rows // tile)
    return rows // tile + min(gp.num_groups, rows)


def group_args(gp: GroupedProblem | None) -> tuple:
    """The grouped-GEMM arguments of the general, swap-AB and wg3 kernels (NO_GROUPS ungrouped)."""
    if gp is None:
        return NO_GROUPS
    return (("u64", gp.groups_ptr), ("u32", gp.num_groups), ("u32", gp.group_rows), ("i64", gp.sb_stride_g))


class Plan:
    """One launch of a GEMM kernel with everything that does not depend on the output pointer or
    the stream computed once per problem (plans.py caches plans per input signature): the loaded
    function, grid, block and shared memory, and a prebuilt argument block that starts as
    gemm_args. Built by each variant's ``plan`` (dispatch/); ``run`` fills in the output (its C
    tensor map when ``tma_store``) and, with ``splits`` other than 1, the stream's split-K workspace for
    ``ws_floats`` partial sums and ``num_tiles`` counters. ``store_box``: 0, the C map's box is one
    128-byte swizzled chunk (``store_swizzle`` 64: a 64-byte chunk, 64B-swizzled); else that many
    columns, unswizzled (the narrow tiles' staging)."""

    def __init__(self, p: GemmProblem, kern, grid: int, threads: int, smem_bytes: int, ldc: int, args: tuple,
                 *, tma_store: bool = False, splits: int = 1, num_tiles: int = 0, ws_floats: int = 0,
                 store_box: int = 0, store_swizzle: int = STORE_CHUNK_BYTES, cluster: int = 1):
        self.tma_store, self.splits, self.num_tiles, self.ws_floats = tma_store, splits, num_tiles, ws_floats
        self.cluster = cluster        # > 1: launched in clusters of that many CTAs (cuLaunchKernelEx)
        self.store_box, self.store_swizzle = store_box, store_swizzle
        self.grid = grid
        self.smem_bytes = smem_bytes
        self.function = kern.kernel.ptr
        self.launch_prefix = driver.launch_args(self.function, grid, threads, smem_bytes)
        self._ws = (0, 0)             # the workspace the argument block holds
        self.device, self.m, self.n, self.ldc, self.esize = p.device, p.m, p.n, ldc, OUT_BYTES[p.out_dtype]
        self.params = KernelParams(args)
        self._lock = threading.Lock()
        self._out_ptr = None          # the output pointer the argument block holds

    def run(self, out_ptr: int, stream_ptr: int) -> None:
        """Launch on ``stream_ptr`` writing C at ``out_ptr`` (row pitch as planned)."""
        ws = counters = 0
        if self.splits != 1:              # K splits, or TAIL_SPLIT (dispatch/general.py)
            ws, counters = split_workspace(self.device, stream_ptr, self.ws_floats, self.num_tiles)
        with self._lock:              # one argument block per plan
            params = self.params
            # NOTES: a caller that drops each result gets the same block back from its pool, so
            # the output's slot and tensor map usually hold already (host overhead: bench/NOTES.md).
            if out_ptr != self._out_ptr:
                params.set_u64(_ARG_OUT, out_ptr)
                if self.tma_store:
                    params.set_desc(_ARG_TMAP_C, tma.encode_2d(
                        out_ptr, self.m, self.n, self.ldc * self.esize, 64,
                        self.store_box or self.store_swizzle // self.esize, self.esize,
                        tma.SWIZZLE_NONE if self.store_box
                        else tma.SWIZZLE_64B if self.store_swizzle == 64 else tma.SWIZZLE_128B))
                self._out_ptr = out_ptr
            if ws and (ws, counters) != self._ws:
                params.set_u64(_ARG_WORKSPACE, ws)
                params.set_u64(_ARG_COUNTERS, counters)
                self._ws = (ws, counters)
            launch(self.device, self.launch_prefix, stream_ptr, params.address, self.cluster)


_get_device_fn = None


def _get_device() -> int:
    """The calling thread's current CUDA device (CuPy's Cython getDevice, looked up once)."""
    global _get_device_fn
    if _get_device_fn is None:
        import cupy

        _get_device_fn = cupy.cuda.runtime.getDevice
    return _get_device_fn()


def _launch_once(prefix: tuple, stream_ptr: int, params: int, cluster: int) -> int:
    if cluster == 1:
        return driver.launch_prebuilt(prefix, stream_ptr, params)
    return driver.launch_cluster_prebuilt(prefix, cluster, stream_ptr, params)


def launch(device: int, prefix: tuple, stream_ptr: int, params: int, cluster: int = 1) -> None:
    """Launch a prebuilt kernel (driver.launch_args) on ``device`` (``cluster`` > 1: in clusters
    of that many CTAs along x). The common case -- the caller's device current, its context bound
    -- costs one cuLaunchKernel; a thread without a bound context gets the device's primary
    context bound and the launch retried; another current device is switched to and back."""
    if _get_device() == device:
        rc = _launch_once(prefix, stream_ptr, params, cluster)
        if rc == driver.CUDA_ERROR_INVALID_CONTEXT:
            import cupy

            cupy.cuda.runtime.setDevice(device)          # binds the primary context
            rc = _launch_once(prefix, stream_ptr, params, cluster)
    else:
        with current_device(device):
            rc = _launch_once(prefix, stream_ptr, params, cluster)
    if rc != 0:
        driver.check_launch(rc, prefix[1], prefix[4], prefix[7], "cuLaunchKernelEx" if cluster > 1 else "cuLaunchKernel")


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


@contextlib.contextmanager
def building(device: int):
    """The context a variant builds its plan in: ``device`` current, and relaxed capture mode
    (compiling and loading a kernel may happen inside a CUDA-graph capture, on a first call
    there)."""
    with current_device(device), driver.relaxed_capture():
        yield
