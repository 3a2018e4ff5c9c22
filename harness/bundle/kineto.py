"""The Kineto (torch.profiler) trace vocabulary, declared once: event categories and names every reader uses.

The importer, the trace summary, ``trace stats`` and every built-in diagnoser match events through these
names, never through literals of their own, so that a new runtime (ROCm, MTIA) or an old torch's category
names are taught to all of them in one place.
"""

from __future__ import annotations

import re

# --- the training step ------------------------------------------------------------------------------
# torch.profiler with a schedule marks each step as a CPU annotation ``ProfilerStep#N``.
PROFILER_STEP_PREFIX = "ProfilerStep#"
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
STEP_MARKER_CATEGORIES = frozenset({"user_annotation", "Operator"})  # "Operator": torch 1.8/1.9 traces


def profiler_step_number(name: str) -> int | None:
    """N of ``ProfilerStep#N``, or None for any other name."""
    if not name.startswith(PROFILER_STEP_PREFIX):
        return None
    digits = name[len(PROFILER_STEP_PREFIX):]
    return int(digits) if digits.isdigit() else None


# --- event categories ---------------------------------------------------------------------------------
CPU_OP_CATEGORIES = frozenset({"cpu_op", "Operator"})  # torch 1.8/1.9 named CPU ops "Operator"
HOST_OP_CATEGORIES = CPU_OP_CATEGORIES | {"user_annotation", "python_function"}
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})  # work that runs on the device
KERNEL_CATEGORY = "kernel"
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver"})  # host-side calls into the device runtime
SYNC_CATEGORY = "cuda_sync"
# Categories that only a GPU (CUDA/ROCm) trace contains.
GPU_EVENT_CATEGORIES = DEVICE_CATEGORIES | RUNTIME_CATEGORIES | {SYNC_CATEGORY, "gpu_user_annotation"}

# --- names --------------------------------------------------------------------------------------------
LAUNCH_NAMES = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaLaunchCooperativeKernel"})
SYNC_NAMES = frozenset({"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent"})
COMM_KERNEL_PREFIXES = ("ncclKernel", "ncclDevKernel")  # device-side collectives
GLOO_COLLECTIVE_PREFIX = "gloo:"  # host-side collectives of the gloo backend (user_annotation)
DATALOADER_NEXT_PREFIX = "enumerate(DataLoader)"  # the training loop waiting for its next batch
