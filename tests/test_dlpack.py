"""CPU: DLPack capsule parsing (both capsule kinds, FP8 codes, strides) and our own producer."""
import gc

import numpy as np
import pytest

from fp8gemm import dlpack
from fp8gemm.intake import intake


class Producer:
    """A DLPack producer over a capsule factory (host memory)."""

    def __init__(self, make, device=(dlpack.DL_CPU, 0)):
        self.make, self.device = make, device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return self.make()

    def __dlpack_device__(self):
        return self.device


def test_read_numpy_legacy_and_versioned():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    for cap in (x.__dlpack__(), x.__dlpack__(max_version=(1, 0))):
        v = dlpack.read_capsule(cap)
        assert v.ptr == x.ctypes.data and v.dtype == "float32"
        assert v.shape == (4, 3) and v.strides == (6, 2) and v.device_type == dlpack.DL_CPU


def test_read_versioned_read_only_flag():
    x = np.arange(4, dtype=np.int8)
    x.flags.writeable = False
    v = dlpack.read_capsule(x.__dlpack__(max_version=(1, 0)))
    assert v.read_only and v.dtype == "int8"


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "bfloat16", "uint8"])
def test_exported_dtypes_round_trip(name):
    buf = np.zeros(64, dtype=np.uint8)
    cap = dlpack.export(buf.ctypes.data, (4, 16), name, dlpack.DL_CUDA, 3, buf)
    v = dlpack.read_capsule(cap)
    assert v.dtype == name and v.shape == (4, 16) and v.strides == (16, 1)
    assert v.device_type == dlpack.DL_CUDA and v.device_id == 3 and v.ptr == buf.ctypes.data


def test_null_strides_mean_row_major():
    buf = np.zeros(60, dtype=np.float32)
    v = dlpack.read_capsule(dlpack.export(buf.ctypes.data, (3, 4, 5), "float32", 1, 0, buf))
    assert v.strides == (20, 5, 1)


def test_explicit_strides_exported():
    buf = np.zeros(60, dtype=np.float32)
    v = dlpack.read_capsule(dlpack.export(buf.ctypes.data, (3, 4), "float32", 1, 0, buf,
                                          strides=(1, 3)))
    assert v.strides == (1, 3)


def test_numpy_consumes_our_capsule_and_deleter_runs():
    gc.collect()
    base = dlpack.live_exports()
    buf = np.arange(6, dtype=np.float32)
    y = np.from_dlpack(Producer(lambda: dlpack.export(buf.ctypes.data, (2, 3), "float32",
                                                      dlpack.DL_CPU, 0, buf)))
    assert y.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert dlpack.live_exports() == base + 1      # numpy holds it
    del y
    gc.collect()
    assert dlpack.live_exports() == base          # numpy called our deleter


def test_unconsumed_capsule_frees_on_destruction():
    gc.collect()
    base = dlpack.live_exports()
    buf = np.zeros(4, np.float32)
    cap = dlpack.export(buf.ctypes.data, (4,), "float32", 1, 0, buf)
    assert dlpack.live_exports() == base + 1
    del cap
    gc.collect()
    assert dlpack.live_exports() == base


def test_rejects_non_capsules():
    with pytest.raises(TypeError, match="DLPack capsule"):
        dlpack.read_capsule(object())


def test_intake_reads_fp8_from_a_dlpack_producer():
    buf = np.zeros((4, 32), dtype=np.uint8)
    prod = Producer(lambda: dlpack.export(buf.ctypes.data, (4, 32), "float8_e4m3fn", dlpack.DL_CUDA,
                                          0, buf), device=(dlpack.DL_CUDA, 0))
    t = intake(prod, "a")
    assert t.dtype == "float8_e4m3fn" and t.shape == (4, 32) and t.strides == (32, 1)
    assert t.device == 0 and t.ptr == buf.ctypes.data and t.keepalive is not None


def test_intake_rejects_host_arrays():
    with pytest.raises(ValueError, match="host"):
        intake(np.zeros((2, 16), np.uint8), "a")
    cpu = Producer(lambda: None, device=(dlpack.DL_CPU, 0))
    with pytest.raises(ValueError, match="a is on the host"):
        intake(cpu, "a")
    with pytest.raises(TypeError, match="b must be a CuPy, PyTorch or JAX array"):
        intake(3.0, "b")
