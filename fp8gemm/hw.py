"""Hardware facts for SM90 (H100/H200), one place on the Python side.

Mirrored once in kernels_cu/common/types.cuh. Per-device values (SM count, L2 size) are read from
the device at run time; these are the architectural constants the kernels are written against.
"""

MAX_SMEM_PER_BLOCK = 232448   # opt-in dynamic shared memory per block, bytes
WGMMA_M = 64                  # rows of one wgmma, per warpgroup
WGMMA_N_STEP = 8              # wgmma N runs 8..256 in steps of 8
WGMMA_N_MAX = 256
SCALE_BLOCK = 128             # block-scaling granularity (1x128 for A, 128x128 for B)
TMA_ALIGN = 16                # bytes: TMA base address and row-stride alignment
K_ALIGN = 16                  # K must be a multiple of this (TMA row stride of FP8 rows)
FP8_E4M3_MAX = 448.0          # largest finite float8_e4m3fn
ARCH = "sm_90a"
MAX_GROUPS = 8192             # grouped GEMMs: the tile prefix (G + 1 words) stays in shared memory

# Driver versions (nvidia-smi's "CUDA Version") a CuPy build needs, by CUDA major version.
MIN_DRIVER = {13: "580", 12: "550"}
# What the cu13 / cu12 extras of pyproject.toml install, by CUDA major version (tests/test_doctor.py
# holds the two equal). Advice names these packages: pip finds them on any index, while
# "fp8gemm[cu13]" resolves only where fp8gemm itself is published.
CUDA_EXTRAS = {13: ("cupy-cuda13x>=14.0,<15", "nvidia-cuda-nvrtc>=13.0,<14"),
               12: ("cupy-cuda12x>=14.0,<15", "nvidia-cuda-nvrtc-cu12>=12.4,<13")}


def install_command(cuda_major: int) -> str:
    """The pip command that installs what the ``cu<major>`` extra brings."""
    return "pip install " + " ".join(f'"{req}"' for req in CUDA_EXTRAS[cuda_major])


CUPY_MISSING = ("fp8gemm needs CuPy for GPU work and CuPy does not import here: install CuPy and NVRTC for "
                "your NVIDIA driver's CUDA major version (nvidia-smi: \"CUDA Version\"): "
                f"{install_command(13)} (driver 580 or newer) or {install_command(12)} (CUDA 12.4 or "
                "newer, driver 550 or newer); from fp8gemm's checkout, pip install \".[cu13]\" (or \".[cu12]\") "
                "does the same")



def gpu_key(name: str) -> str:
    """A GPU's dispatch-table name from its device name: 'NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB
    HBM3' -> 'h100', 'NVIDIA GH200 480GB' -> 'gh200' (the first word with a digit, lower case).
    Here, where both the dispatcher (its tables) and the launcher (a device's key) read it."""
    for word in name.replace("NVIDIA", " ").split():
        if any(ch.isdigit() for ch in word):
            return "".join(ch for ch in word.lower() if ch.isalnum())
    return "".join(ch for ch in name.lower() if ch.isalnum()) or "unknown"



def _one_line(exc) -> str:
    return " ".join(str(exc).split())


def gpu_problem(framework: str | None = None) -> str | None:
    """Why fp8gemm's kernels cannot run here (no CuPy, no CUDA GPU, GPU 0 not SM90; with
    ``framework`` "torch" or "jax", that framework sees no GPU), or None. Quick: nothing compiles."""
    try:
        import cupy
    except ImportError as exc:
        return f"{CUPY_MISSING} ({_one_line(exc)})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:          # noqa: BLE001 - CuPy's CUDARuntimeError and driver errors alike
        return f"CUDA sees no GPU here ({_one_line(exc)})"
    if not count:
        return "CUDA sees no GPU here"
    p = cupy.cuda.runtime.getDeviceProperties(0)
    if (p["major"], p["minor"]) != (9, 0):
        name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
        return f"GPU 0 is {name} (compute capability {p['major']}.{p['minor']}); fp8gemm's kernels need SM90 (H100 / H200)"
    if framework == "torch":
        import torch
        if not torch.cuda.is_available():
            return f"this torch ({torch.__version__}) sees no CUDA GPU: install a CUDA build of PyTorch"
    if framework == "jax":
        import jax
        if jax.default_backend() != "gpu":
            return (f"JAX runs on {jax.default_backend()}, not the GPU: install a CUDA build of jaxlib "
                    f"(pip install \"jax[cuda13]\" or \"jax[cuda12]\")")
    return None


def require_gpu(what: str, framework: str | None = None) -> None:
    """Exit (SystemExit, status 1) with what is missing unless fp8gemm's kernels can run here."""
    problem = gpu_problem(framework)
    if problem:
        raise SystemExit(f"{what} needs an SM90 GPU: {problem}. (python -m fp8gemm lists what is missing.)")


_checked_devices = set()


def import_cupy():
    """The cupy module, or an ImportError saying which extra installs it."""
    try:
        import cupy
    except ImportError as exc:
        raise ImportError(f"{CUPY_MISSING} ({exc})") from exc
    return cupy


def check_arch(device: int, name: str, major: int, minor: int) -> None:
    """Raise a clear error unless the GPU is SM90 (compute capability 9.0: H100, H200, H800,
    H20, GH200); the kernels are built for sm_90a (wgmma, TMA) and nothing else runs them."""
    if (major, minor) != (9, 0):
        raise RuntimeError(f"fp8gemm needs an SM90 GPU (compute capability 9.0: H100, H200, H800, H20, GH200); "
                           f"GPU {device} is {name} (compute capability {major}.{minor}), which cannot run "
                           f"its sm_90a kernels")


def require_sm90(device: int) -> None:
    """check_arch for a CUDA device, once per device and process."""
    if device in _checked_devices:
        return
    cupy = import_cupy()
    props = cupy.cuda.runtime.getDeviceProperties(device)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    check_arch(device, name, int(props["major"]), int(props["minor"]))
    _checked_devices.add(device)
