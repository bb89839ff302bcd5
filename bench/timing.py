"""GPU timing for the benchmark: L2 flush by a read kernel, device time per call from CUPTI.

Method: before every timed call a kernel *reads* a buffer of 256 MiB (over 4x the H200's 60 MB
L2), so the call starts L2-cold with no dirty lines to write back. All calls of one shape run
inside one torch.profiler (kineto/CUPTI) session; afterwards the device activities are split at
the flush kernels, and each call's time is the sum of the durations of every kernel, memset and
memcpy it launched (a split-K reduction or a layout transpose counts). Launch gaps and host work
are excluded. The statistic is the median over the calls.

The callables take turns (round robin: one call of each, ``iters`` times over), never a block of
one then a block of the next. The H200 lowers its clocks under sustained load and recovers over
more than 100 ms, so a kernel's time depends on what ran in the tens of milliseconds before it: in
blocks of 20, a compute-bound kernel timed right after another heavy one ran 12-18% slower than
the same kernel timed first (bench/NOTES.md). Taking turns gives every contender the same history.

Without torch, a fallback times each call with CUDA events after the flush on the same stream.

A second timer (``fp8gemm-bench --timer graph``, time_calls_graph) replays CUDA graphs: what a
call costs inside a captured graph, its kernels plus the gaps the GPU leaves between graph nodes.
CUPTI's kernel durations leave out whatever a kernel costs outside its own start and end (its
launch, the grid's retirement); the two timers rank short kernels differently where those costs
differ between contenders (bench/NOTES.md: at N = 512, K = 1024 DeepGEMM's graph time is 0.7-1.1
us above its CUPTI time, ours 0.25-0.5 us).
"""
from __future__ import annotations

import statistics

FLUSH_KERNEL = "fp8gemm_l2_flush_read"
FLUSH_BYTES = 256 << 20

_FLUSH_SRC = r"""
extern "C" __global__ void fp8gemm_l2_flush_read(const float4* __restrict__ buf,
                                                 unsigned long long n, float* sink) {
    // Read every byte once through L2 (ld.global.cg); write nothing unless the (zero) buffer sums
    // to a magic value, which keeps the loads alive without dirtying L2.
    float acc = 0.0f;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const float4 v = __ldcg(buf + i);
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 1234.5f) *sink = acc;
}
"""


class StreamRef:
    """What CuPy's launcher needs of a stream: its pointer."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr


class L2Flush:
    """Launches the read-flush kernel on a given stream pointer."""

    def __init__(self, device: int = 0, nbytes: int = FLUSH_BYTES):
        import cupy

        with cupy.cuda.Device(device):
            self.buf = cupy.zeros(nbytes // 4, dtype=cupy.float32)
            self.sink = cupy.zeros(1, dtype=cupy.float32)
            self.kernel = cupy.RawKernel(_FLUSH_SRC, FLUSH_KERNEL)
            sms = cupy.cuda.Device(device).attributes["MultiProcessorCount"]
        self.grid = (sms * 8, 1, 1)
        self.n = nbytes // 16

    def __call__(self, stream_ptr: int) -> None:
        import numpy as np

        self.kernel.kernel(self.grid, (256, 1, 1), (self.buf, np.uint64(self.n), self.sink), 0,
                           StreamRef(stream_ptr))


def _device_activities(prof):
    """(start_ns, duration_ns, name) of every device activity, sorted by start."""
    out = []
    try:
        for e in prof.profiler.kineto_results.events():
            if e.device_type().name == "CUDA":
                out.append((e.start_ns(), e.duration_ns(), e.name()))
    except AttributeError:   # older/newer torch without kineto_results: the FunctionEvent path
        import torch

        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                out.append((e.time_range.start * 1000, (e.time_range.end - e.time_range.start) * 1000,
                            e.name))
    out.sort()
    return out


def split_at_flush(activities, flush_name: str = FLUSH_KERNEL):
    """Per call: the summed duration (us) of everything between one flush and the next."""
    calls, current = [], None
    for _start, dur_ns, name in activities:
        if flush_name in name:
            if current is not None:
                calls.append(current)
            current = 0.0
        elif current is not None:
            current += dur_ns / 1000.0
    if current is not None:
        calls.append(current)
    return calls


def turns(names: list, iters: int) -> list:
    """The call order: every name once per round, ``iters`` rounds."""
    return [name for _ in range(iters) for name in names]


def time_calls(fns: dict, flush: L2Flush, iters: int = 20) -> dict:
    """{name: median device microseconds per call} for every callable in ``fns`` (GPU 0 stream)."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return _time_calls_events(fns, flush, iters)
    stream = torch.cuda.current_stream().cuda_stream
    order = turns(list(fns), iters)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for name in order:
            flush(stream)
            fns[name]()
        torch.cuda.synchronize()
    calls = split_at_flush(_device_activities(prof))
    if len(calls) != len(order):
        raise RuntimeError(f"profiler saw {len(calls)} flushed calls, expected {len(order)}")
    per = {}
    for name, us in zip(order, calls):
        per.setdefault(name, []).append(us)
    return {name: statistics.median(v) for name, v in per.items()}


def _time_calls_events(fns: dict, flush: L2Flush, iters: int) -> dict:
    import cupy

    stream = cupy.cuda.get_current_stream()
    per = {}
    for name in turns(list(fns), iters):
        flush(stream.ptr)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        fns[name]()
        end.record(stream)
        end.synchronize()
        per.setdefault(name, []).append(cupy.cuda.get_elapsed_time(start, end) * 1000.0)
    return {name: statistics.median(v) for name, v in per.items()}


GRAPH_REPS = 10
_FLUSH_ONLY = object()


def time_calls_graph(fns: dict, flush: L2Flush, iters: int = 20, reps: int = GRAPH_REPS) -> dict:
    """{name: median microseconds per call} by CUDA-graph replay. Each callable is captured as
    ``reps`` x [flush, call] and the flush alone as ``reps`` x [flush]; the graphs replay in turns,
    ``iters`` rounds, each replay between two CUDA events; per call = (median of its replays -
    median of the flush graph's) / reps. Needs torch; every callable must be capturable (launch
    on torch's current stream, no host sync)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):      # warm on the capture stream: allocations, plan caches
        for fn in fns.values():
            fn()
        flush(stream.cuda_stream)
    torch.cuda.synchronize()

    def capture(fn):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            for _ in range(reps):
                flush(stream.cuda_stream)
                if fn is not _FLUSH_ONLY:
                    fn()
        return g
    graphs = {name: capture(fn) for name, fn in fns.items()}
    graphs[_FLUSH_ONLY] = capture(_FLUSH_ONLY)
    marks = []
    for name in turns(list(graphs), iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graphs[name].replay()
        end.record()
        marks.append((name, start, end))
    torch.cuda.synchronize()
    per = {}
    for name, start, end in marks:
        per.setdefault(name, []).append(start.elapsed_time(end) * 1000.0)
    base = statistics.median(per.pop(_FLUSH_ONLY))
    del graphs
    return {name: (statistics.median(v) - base) / reps for name, v in per.items()}
