"""CPU: the prebuilt kernel-argument block (slots, alignment, per-call updates) and the plan
cache's input signatures."""
import ctypes
import struct

import numpy as np

from fp8gemm import plans
from fp8gemm.launcher import KernelParams


def read(ptr, size):
    return ctypes.string_at(ptr, size)


def test_slots_and_updates():
    desc = np.frombuffer(bytes(range(128)), dtype=np.dtype((np.void, 128)))[0]
    params = KernelParams([("desc", desc), ("u64", 0xDEADBEEF00), ("i64", -5), ("u32", 7),
                           ("desc", desc), ("u64", 1)])
    offs = params.offsets
    assert offs[0] == 0 and offs[1] == 128 and offs[2] == 136 and offs[3] == 144
    assert offs[4] % 64 == 0 and offs[4] >= 152 and offs[5] == offs[4] + 128
    ptrs = params.pointers
    assert len(ptrs) == 6
    assert [p - ctypes.addressof(params.buffer) for p in ptrs] == list(offs)
    assert read(ptrs[0], 128) == bytes(range(128))
    assert struct.unpack("<Q", read(ptrs[1], 8))[0] == 0xDEADBEEF00
    assert struct.unpack("<q", read(ptrs[2], 8))[0] == -5
    assert struct.unpack("<I", read(ptrs[3], 4))[0] == 7
    other = np.frombuffer(bytes([9] * 128), dtype=np.dtype((np.void, 128)))[0]
    params.set_u64(5, 12345)
    params.set_desc(4, other)
    assert struct.unpack("<Q", read(ptrs[5], 8))[0] == 12345
    assert read(ptrs[4], 128) == bytes([9] * 128)
    assert read(ptrs[0], 128) == bytes(range(128))          # neighbours untouched
    assert struct.unpack("<I", read(ptrs[3], 4))[0] == 7


class FakeCupy:
    __module__ = "cupy._core.core"

    class _D:                      # cupy.cuda.MemoryPointer: ptr and device_id
        def __init__(self, ptr):
            self.ptr, self.device_id = ptr, 0

    class _Dev:
        id = 0

    def __init__(self, ptr, shape, strides, dtype):
        self.data, self.shape, self.strides = self._D(ptr), shape, strides
        self.dtype, self.device = np.dtype(dtype), self._Dev()


def test_plan_keys_tell_arrays_apart(monkeypatch):
    monkeypatch.setitem(plans._array_types, "cupy", FakeCupy)      # stands in for cupy.ndarray
    a = FakeCupy(1 << 20, (4, 256), (256, 1), np.uint8)
    b = FakeCupy(2 << 20, (128, 256), (256, 1), np.uint8)
    sa = FakeCupy(3 << 20, (4, 2), (8, 4), np.float32)
    sb = FakeCupy(4 << 20, (1, 2), (8, 4), np.float32)
    k1 = plans.plan_key("matmul", "cupy", None, a, b, sa, sb)
    assert k1 == plans.plan_key("matmul", "cupy", None, a, b, sa, sb)
    sa_t = FakeCupy(3 << 20, (4, 2), (4, 16), np.float32)          # same pointer, other strides
    assert plans.plan_key("matmul", "cupy", None, a, b, sa_t, sb) != k1
    assert plans.plan_key("matmul", "cupy", "float32", a, b, sa, sb) != k1
    assert plans.plan_key("matmul", "cupy", None, a, b, sa, object()) is None   # not CuPy/torch: no cache
    assert plans.plan_key("matmul", "cupy", [1], a, b, sa, sb) is None          # unhashable out_dtype
    assert plans.plan_key("matmul", "cupy", None, a, b, sa, sb, sb) != k1       # an out= array joins the key
    assert plans.plan_key("grouped", "cupy", None, a, b, sa, sb) != k1           # entry points never share
    assert plans.plan_key("matmul", "jax", None, a, b, sa, sb) is None          # only CuPy / torch callers


def test_unusable_kernel_cache_compiles_in_memory_with_a_warning(monkeypatch):
    """CuPy's disk cache raising PermissionError (read-only CUPY_CACHE_DIR) must not fail the
    call: one warning, a retry with CUPY_CACHE_IN_MEMORY=1, the variable restored afterwards."""
    import contextlib
    import os
    import sys
    import types
    import warnings

    from fp8gemm import compiler

    seen = []

    class FakeFunction:
        max_dynamic_shared_size_bytes = 0

        def compile(self):
            pass

    class FakeModule:
        def __init__(self, code, options, name_expressions):
            seen.append(os.environ.get("CUPY_CACHE_IN_MEMORY"))
            if os.environ.get("CUPY_CACHE_IN_MEMORY") != "1":
                raise PermissionError(13, "Permission denied", "/read-only/cache")

        def get_function(self, name):
            return FakeFunction()

    fake = types.SimpleNamespace(RawModule=FakeModule,
                                 cuda=types.SimpleNamespace(Device=lambda d: contextlib.nullcontext()))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(compiler, "require_sm90", lambda device: None)     # no GPU to ask
    monkeypatch.delenv("CUPY_CACHE_IN_MEMORY", raising=False)
    key_args = (999, "sm90_fp8_gemm_general", ("cache-test",))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kern = compiler.get_kernel(*key_args, 100 * 1024)
    try:
        assert isinstance(kern, FakeFunction) and kern.max_dynamic_shared_size_bytes == 100 * 1024
        assert seen == [None, "1"]
        assert "CUPY_CACHE_IN_MEMORY" not in os.environ
        msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        assert len(msgs) == 1 and "compiling in memory" in msgs[0] and "Permission denied" in msgs[0]
    finally:
        compiler._kernels.pop(key_args, None)


def test_split_workspace_capture_bookkeeping(monkeypatch):
    """Eager launches: one zeroed workspace per (device, stream), synchronized once. Captured
    launches: their own workspace (allocated in relaxed capture mode, never shared with eager
    calls), counters zeroed by a captured memset on every call; an outgrown captured workspace is
    kept alive for the graphs that use it."""
    import contextlib
    import sys
    import types

    from fp8gemm import driver, launcher

    class Arr:
        def __init__(self, n, zeroed):
            self.size, self.zeroed = n, zeroed
            self.data = types.SimpleNamespace(ptr=id(self))

    events = []

    class Dev:
        def __init__(self, d):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def synchronize(self):
            events.append("sync")

    fake = types.SimpleNamespace(empty=lambda n, dtype: Arr(n, False), zeros=lambda n, dtype: Arr(n, True),
                                 float32="f4", uint32="u4", cuda=types.SimpleNamespace(Device=Dev))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(launcher, "_workspaces", {})
    monkeypatch.setattr(launcher, "_captured_retired", [])
    capturing = {"on": False}
    monkeypatch.setattr(driver, "stream_capturing", lambda s: capturing["on"])
    monkeypatch.setattr(driver, "relaxed_capture", lambda: events.append("relaxed") or contextlib.nullcontext())
    monkeypatch.setattr(driver, "memset_u32_async", lambda ptr, v, n, s: events.append(("memset", ptr, n, s)))

    ws1, c1 = launcher.split_workspace(0, 77, 1000, 10)
    assert launcher.split_workspace(0, 77, 500, 5) == (ws1, c1) and events == ["sync"]
    capturing["on"] = True
    ws2, c2 = launcher.split_workspace(0, 77, 1000, 10)
    assert (ws2, c2) != (ws1, c1) and events[1] == "relaxed" and events[2] == ("memset", c2, 10, 77)
    assert launcher.split_workspace(0, 77, 1000, 10) == (ws2, c2) and events[3] == ("memset", c2, 10, 77)
    ws3, c3 = launcher.split_workspace(0, 77, 4000, 40)            # outgrown: the old one is kept
    assert ws3 != ws2 and len(launcher._captured_retired) == 1 and events[-1] == ("memset", c3, 40, 77)
    assert "sync" not in events[1:]                                # no synchronization under capture
    capturing["on"] = False
    assert launcher.split_workspace(0, 77, 1000, 10) == (ws1, c1)  # eager calls keep their own


def test_tma_store_only_where_rows_end_on_16_bytes():
    """A TMA store clips at 16-byte granularity of a row's end: rows of C that do not end on a
    16-byte boundary (N * esize % 16 != 0) must take the direct stores."""
    from fp8gemm.launcher import tma_store_ok
    assert tma_store_ok(4096, 128, 2, 4096, True)
    assert not tma_store_ok(300, 128, 2, 320, True)        # 600-byte rows in a 640-byte pitch
    assert tma_store_ok(300, 64, 4, 320, True)             # fp32: 1200-byte rows
    assert not tma_store_ok(304, 128, 2, 300, True)        # pitch not a multiple of 16 bytes
    assert not tma_store_ok(4096, 128, 2, 4096, False)     # base not 16-byte aligned
    assert not tma_store_ok(4096, 32, 2, 4096, True)       # a 64-byte tile row: not whole chunks
    # the general kernel's unswizzled staging (narrow): tile rows of 16, 32 or 64 bytes
    for block_n, esize in ((8, 2), (16, 2), (32, 2), (8, 4), (16, 4)):
        assert tma_store_ok(4096, block_n, esize, 4096, True, narrow=True)
    assert not tma_store_ok(4096, 48, 2, 4096, True, narrow=True)    # 96 bytes: neither form
    assert not tma_store_ok(300, 32, 2, 320, True, narrow=True)      # the 16-byte row end still rules
    assert not tma_store_ok(4096, 16, 2, 4096, False, narrow=True)


def test_narrow_tiles_store_one_unswizzled_box():
    """The general kernel's tiles of 8-32 bf16 (8-16 fp32) columns count the unswizzled staging
    (NarrowStaging, one 64-row box per consumer warpgroup) in their shared memory; 128-byte rows
    keep the swizzled staging's size, and widths of neither form have none."""
    from fp8gemm.dispatch import general as g
    assert g.general_staging_bytes(32, "bfloat16", 64) == 64 * 64
    assert g.general_staging_bytes(16, "float32", 128) == 128 * 64
    assert g.general_staging_bytes(64, "bfloat16", 64) == g.staging_bytes(64, "bfloat16", 64) == 64 * 128
    assert g.general_staging_bytes(48, "bfloat16") == 0
    c = g.General(32, 8, 8, 1, 64)
    assert c.smem_bytes("bfloat16") == g.ring_smem_bytes(32, 8, 64 * 64, 64)


def test_launch_goes_through_cupy_wrapper_and_falls_back_to_ctypes(monkeypatch):
    """driver.launch_prebuilt: the Cython wrapper gets (function, grid, 1, 1, block, 1, 1, smem,
    stream, params, 0); a launch it reports as failed is repeated through ctypes, whose CUresult
    the caller sees (launcher.launch binds a missing context on 201 and retries)."""
    from fp8gemm import driver

    class WrapperError(Exception):
        pass

    seen = []

    def wrapper(*args):
        seen.append(("cy", args))
        if args[0] == 0xBAD:
            raise WrapperError("CUDA_ERROR_INVALID_CONTEXT")

    class RawLaunch:
        restype = None

        def __call__(self, *args):
            seen.append(("ctypes", tuple(a.value if hasattr(a, "value") else a for a in args)))
            return driver.CUDA_ERROR_INVALID_CONTEXT

    monkeypatch.setattr(driver, "_cy_launch", (wrapper, WrapperError))
    monkeypatch.setattr(driver, "_raw_launch", RawLaunch())
    prefix = driver.launch_args(0x1234, 132, 384, 200704)
    assert prefix == (0x1234, 132, 1, 1, 384, 1, 1, 200704)
    assert driver.launch_prebuilt(prefix, 77, 0x5000) == 0
    assert seen == [("cy", (0x1234, 132, 1, 1, 384, 1, 1, 200704, 77, 0x5000, 0))]
    seen.clear()
    assert driver.launch_prebuilt(driver.launch_args(0xBAD, 1, 128, 0), 0, 0x6000) == driver.CUDA_ERROR_INVALID_CONTEXT
    assert [kind for kind, _ in seen] == ["cy", "ctypes"]
    assert seen[1][1] == (0xBAD, 1, 1, 1, 128, 1, 1, 0, None, 0x6000, None)
    # Without CuPy's wrapper every launch takes the ctypes path.
    seen.clear()
    monkeypatch.setattr(driver, "_cy_launch", False)
    assert driver.launch_prebuilt(prefix, 5, 0x7000) == driver.CUDA_ERROR_INVALID_CONTEXT
    assert [kind for kind, _ in seen] == ["ctypes"]


def test_moe_glue_plan_grids_scalars_and_pointer_slots(monkeypatch):
    """fp8gemm.moe's prebuilt glue launches: each op's grid, block and fixed scalars (pairs, k, E,
    rows, cols, limit) as the kernel expects them, and a call writing exactly the ten pointer
    slots, in order, before it launches."""
    import struct
    import types

    from fp8gemm import moe_layer

    monkeypatch.setattr(moe_layer.compiler, "get_kernel",
                        lambda device, variant, targs, smem: types.SimpleNamespace(
                            kernel=types.SimpleNamespace(ptr=1000 + targs[0])))
    launches = []

    def fake_launch(device, prefix, stream, address):
        params = plan.launches[prefix[0] - 1000][1]
        launches.append((prefix, [struct.unpack_from("<Q", params.buffer, params.offsets[s])[0]
                                  for s in moe_layer._PTR_SLOTS]))
    monkeypatch.setattr(moe_layer, "launch", fake_launch)
    t, k, experts, hidden, inter, lim = 300, 6, 256, 4096, 2048, 10.0
    pairs = t * k
    plan = moe_layer._GluePlan(0, t, pairs, k, experts, hidden, inter, lim)

    def scalars(op):
        params = plan.launches[op][1]
        u32 = [struct.unpack_from("<I", params.buffer, params.offsets[s])[0] for s in (2, 3, 4, 13, 14)]
        return u32 + [struct.unpack_from("<f", params.buffer, params.offsets[15])[0]]
    want = {moe_layer.ROUTE: ((1, 1024), (0, 0)),
            moe_layer.SCATTER: ((min(-(-pairs * 32 // 256), 4096), 256), (0, hidden)),
            moe_layer.SWIGLU: ((-(-pairs * (inter // 128) * 32 // 256), 256), (pairs, inter)),
            moe_layer.COMBINE: ((t, 256), (t, hidden))}
    for op, ((grid, block), (rows, cols)) in want.items():
        prefix = plan.launches[op][0]
        assert prefix == (1000 + op, grid, 1, 1, block, 1, 1, 0)
        assert scalars(op) == [pairs, k, experts, rows, cols, lim]
    pointers = tuple(range(11, 21))
    plan.run(0, 7, moe_layer.SWIGLU, pointers)
    assert launches == [(plan.launches[moe_layer.SWIGLU][0], list(pointers))]
