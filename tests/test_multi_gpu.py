"""GPU, two or more GPUs: inputs on GPU 1 run on GPU 1 whatever device is current, the
result lands there, the caller's current device is left alone; split-K workspaces, compiled
modules and plans are per device; both GPUs from threads at once. Skipped with the reason on a
machine with one GPU."""
import threading

import pytest

from generators import random_case

import fp8gemm
from fp8gemm import reference
from fp8gemm.dispatch import General, SwapAB
from fp8gemm.testing import as_float64

pytestmark = pytest.mark.gpu

CONFIGS = [None, General(32, 4, 8, splits=4), SwapAB(16, 4, 8, splits=3)]


@pytest.fixture(autouse=True)
def _two_gpus():
    import cupy
    n = cupy.cuda.runtime.getDeviceCount()
    if n < 2:
        pytest.skip(f"needs 2 GPUs, this machine has {n}")


def _case_on(device, m, n, k, seed):
    import cupy
    with cupy.cuda.Device(device):
        case = random_case(m, n, k, seed=seed)
        return case, case.reference(cupy)


def _err_on(device, out, ref):
    import cupy
    with cupy.cuda.Device(device):
        return reference.rel_fro_error(as_float64(out), ref)


@pytest.mark.parametrize("cfg", CONFIGS, ids=["dispatcher", "split_k", "swap_ab_split_k"])
def test_cupy_inputs_on_gpu1_run_there(cfg):
    import cupy
    case, ref = _case_on(1, 40, 2048, 2048, seed=71)
    cupy.cuda.runtime.setDevice(0)
    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=cfg)
    assert cupy.cuda.runtime.getDevice() == 0, "the caller's current device changed"
    assert out.device.id == 1
    assert _err_on(1, out, ref) <= 4e-3


def test_torch_inputs_on_gpu1_and_the_quantizer():
    import cupy
    import torch
    torch.cuda.set_device(0)
    x = torch.randn(24, 1024, device="cuda:1", dtype=torch.bfloat16)
    a, sa = fp8gemm.quantize_per_token_group(x)
    assert a.device.index == 1 and sa.device.index == 1
    w = torch.randn(512, 1024).numpy()
    qb, sb = fp8gemm.quantize_per_block(w)
    b = torch.from_numpy(qb.view("uint8")).to("cuda:1").view(torch.float8_e4m3fn)
    sbt = torch.from_numpy(sb).to("cuda:1")
    out = fp8gemm.matmul(a, b, sa, sbt)
    assert out.device.index == 1 and torch.cuda.current_device() == 0
    torch.cuda.synchronize(1)
    want = reference.matmul(a.view(torch.uint8).cpu().numpy(), qb.view("uint8"), sa.cpu().numpy(), sb)
    got = out.float().cpu().numpy()
    assert reference.rel_fro_error(got, want) <= 4e-3
    assert cupy.cuda.runtime.getDevice() == 0


def test_both_gpus_from_threads_at_once():
    """Two threads per GPU, each thread 10 split-K calls on its own stream of its GPU."""
    import cupy
    cases = {d: _case_on(d, 16, 4096, 4096, seed=80 + d) for d in (0, 1)}
    cfg = SwapAB(16, 4, 8, splits=8)
    errors, worst = [], {}

    def work(idx, device):
        try:
            cupy.cuda.runtime.setDevice(device)
            case, ref = cases[device]
            with cupy.cuda.Stream(non_blocking=True) as stream:
                for _ in range(10):
                    out = fp8gemm.matmul(case.a, case.b, case.a_scale, case.b_scale, config=cfg)
                    stream.synchronize()
                    worst[idx] = max(worst.get(idx, 0.0), reference.rel_fro_error(as_float64(out), ref))
        except Exception as exc:
            errors.append(f"thread {idx} (GPU {device}): {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(i, i % 2)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert len(worst) == 4 and max(worst.values()) <= 4e-3, worst
