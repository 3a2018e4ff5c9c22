"""A tiny synthetic GPU Kineto trace with known figures (for trace stats and the GPU rules).

Each step of ``STEP_US`` holds, on the training thread, a DataLoader wait, launches of kernels that
start ``delay_us`` after their launch call, and optionally a pageable device-to-host copy that blocks
the host while the device is idle; the autograd thread runs the backward op.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

STEP_US = 10_000.0


def gpu_trace(path: Path, *, steps: int = 4, kernels: int = 20, kernel_us: float = 100.0, gap_us: float = 200.0,
              delay_us: float = 10.0, pageable_block_us: float = 0.0, wait_us: float = 1_000.0,
              comm_us: float = 0.0, legacy: bool = False, device_events: bool = True) -> Path:
    op = "Operator" if legacy else "cpu_op"
    ann = "Operator" if legacy else "user_annotation"
    kern, rt, mc = ("Kernel", "Runtime", "Memcpy") if legacy else ("kernel", "cuda_runtime", "gpu_memcpy")
    ev: list[dict] = []
    corr = 0
    for s in range(steps):
        t0 = 1_000.0 + s * STEP_US
        ev.append({"ph": "X", "cat": ann, "name": f"ProfilerStep#{s + 1}", "pid": 1, "tid": 1, "ts": t0, "dur": STEP_US})
        ev.append({"ph": "X", "cat": ann, "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                   "pid": 1, "tid": 1, "ts": t0, "dur": wait_us})
        t = t0 + wait_us
        for k in range(kernels):
            corr += 1
            launch = t + k * (kernel_us + gap_us)
            ev.append({"ph": "X", "cat": op, "name": "aten::mul", "pid": 1, "tid": 1, "ts": launch - 2, "dur": 8})
            ev.append({"ph": "X", "cat": rt, "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": launch, "dur": 5,
                       "args": {"correlation": corr}})
            if device_events:
                ev.append({"ph": "X", "cat": kern, "name": "void at::native::vectorized_elementwise_kernel<4>()",
                           "pid": 0, "tid": 7, "ts": launch + delay_us, "dur": kernel_us, "args": {"correlation": corr}})
        end = t + kernels * (kernel_us + gap_us)
        if comm_us:
            corr += 1
            ev.append({"ph": "X", "cat": rt, "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": end, "dur": 5,
                       "args": {"correlation": corr}})
            if device_events:
                ev.append({"ph": "X", "cat": kern, "name": "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
                           "pid": 0, "tid": 20, "ts": end + 10, "dur": comm_us, "args": {"correlation": corr}})
            end += comm_us + 20
        if pageable_block_us:
            corr += 1
            ev.append({"ph": "X", "cat": rt, "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": end,
                       "dur": pageable_block_us, "args": {"correlation": corr}})
            if device_events:
                ev.append({"ph": "X", "cat": mc, "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 7,
                           "ts": end + pageable_block_us - 3, "dur": 2, "args": {"correlation": corr, "bytes": 4}})
        ev.append({"ph": "X", "cat": op, "name": "autograd::engine::evaluate_function: MulBackward0", "pid": 1,
                   "tid": 2, "ts": t0 + wait_us, "dur": 3_000.0})
    doc = {"schemaVersion": 1, "deviceProperties": [{"name": "Synthetic GPU"}], "traceEvents": ev}
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    return path
