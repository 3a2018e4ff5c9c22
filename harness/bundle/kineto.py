"""The Kineto (torch.profiler) trace vocabulary, declared once: event categories and names every reader uses.

The importer, the trace summary, ``trace stats`` and every built-in diagnoser match events through these
names, never through literals of their own, so that a new runtime (ROCm, MTIA) or an old torch's category
names are taught to all of them in one place.

Where the names come from (Kineto's ``ActivityType`` table, checked against the real traces in
``../shared/real-traces``):

* categories by torch version: torch >= 1.10 writes ``cpu_op``, ``user_annotation``, ``kernel``,
  ``gpu_memcpy``, ``gpu_memset``, ``cuda_runtime``, ``cuda_driver``, ``cuda_sync``,
  ``gpu_user_annotation``, ``python_function``; torch 1.8/1.9 wrote ``Operator`` (CPU ops and the
  ``ProfilerStep#N`` markers), ``Kernel``, ``Memcpy``, ``Memset`` and ``Runtime``. MTIA traces use
  ``mtia_runtime`` (host) and ``mtia_ccp_events`` (device); Intel XPU ``xpu_runtime``/``xpu_driver``.
  ROCm traces keep the CUDA category names (``cuda_runtime``, ``kernel``) with HIP call names.
* runtime calls: CUDA runtime (``cudaLaunchKernel``...), the driver API (``cuLaunchKernel``...), HIP
  (``hipLaunchKernel``, ``hipExtModuleLaunchKernel``, ``hipModuleLaunchKernel``...).
* communication kernels: NCCL's ``ncclKernel_*`` (before 2.19) and ``ncclDevKernel_*`` (2.19 on, and
  RCCL), MSCCL, NVSHMEM, DeepEP's dispatch/combine kernels and custom all-reduce kernels.
"""

from __future__ import annotations

import re

# --- the training step ------------------------------------------------------------------------------
# torch.profiler with a schedule marks each step as a CPU annotation ``ProfilerStep#N``.
PROFILER_STEP_PREFIX = "ProfilerStep#"
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
STEP_MARKER_CATEGORIES = frozenset({"user_annotation", "Operator"})  # "Operator": torch 1.8/1.9 traces
# (the device copy of the marker, ``gpu_user_annotation``, spans only the step's kernels: not a step)


def profiler_step_number(name: str) -> int | None:
    """N of ``ProfilerStep#N``, or None for any other name."""
    if not name.startswith(PROFILER_STEP_PREFIX):
        return None
    digits = name[len(PROFILER_STEP_PREFIX):]
    return int(digits) if digits.isdigit() else None


# --- event categories ---------------------------------------------------------------------------------
CPU_OP_CATEGORIES = frozenset({"cpu_op", "Operator"})  # torch 1.8/1.9 named CPU ops "Operator"
HOST_OP_CATEGORIES = CPU_OP_CATEGORIES | {"user_annotation", "python_function"}
KERNEL_CATEGORIES = frozenset({"kernel", "Kernel", "mtia_ccp_events"})
MEMCPY_CATEGORIES = frozenset({"gpu_memcpy", "Memcpy"})
MEMSET_CATEGORIES = frozenset({"gpu_memset", "Memset"})
DEVICE_CATEGORIES = KERNEL_CATEGORIES | MEMCPY_CATEGORIES | MEMSET_CATEGORIES  # work that runs on the device
# host-side calls into the device runtime
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "mtia_runtime", "xpu_runtime", "xpu_driver"})
SYNC_CATEGORY = "cuda_sync"  # Kineto's own sync markers (Context Sync, Stream Sync, Stream Wait Event)
# Categories that only a trace of a job on an accelerator (CUDA, ROCm, MTIA, XPU) contains.
GPU_EVENT_CATEGORIES = DEVICE_CATEGORIES | RUNTIME_CATEGORIES | {SYNC_CATEGORY, "gpu_user_annotation"}

# --- runtime calls ------------------------------------------------------------------------------------
# Calls that queue a kernel (or a whole graph) on the device.
LAUNCH_NAMES = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchKernelEx", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cudaGraphLaunch",
    "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", "cuGraphLaunch",
    "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel",
    "hipLaunchCooperativeKernel", "hipGraphLaunch", "hipExtLaunchMultiKernelMultiDevice",
})
# Calls that block the host thread until device work finishes. (``cudaStreamWaitEvent`` is not one: it
# makes a stream wait on the device and returns at once.)
SYNC_NAMES = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
    "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize", "hipCtxSynchronize",
})
# Copies that are synchronous by API (the host waits for the queue to drain, then for the copy).
SYNC_COPY_NAMES = frozenset({
    "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol", "cudaMemset",
    "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2", "cuMemcpy",
    "hipMemcpy", "hipMemcpy2D", "hipMemcpyDtoH", "hipMemcpyHtoD", "hipMemcpyWithStream", "hipMemset",
})
# Copies asynchronous by API, which still block the host when the host side is pageable memory.
ASYNC_COPY_NAMES = frozenset({
    "cudaMemcpyAsync", "cudaMemcpy2DAsync", "cuMemcpyAsync", "cuMemcpyDtoHAsync_v2", "cuMemcpyHtoDAsync_v2",
    "hipMemcpyAsync", "hipMemcpy2DAsync", "hipMemcpyDtoHAsync", "hipMemcpyHtoDAsync",
})
# cudaFree/hipFree synchronise the whole device (what the caching allocator exists to avoid).
FREE_NAMES = frozenset({"cudaFree", "cuMemFree_v2", "cuMemFree", "hipFree", "cudaFreeHost", "hipHostFree"})
# Raw allocations: many per step mean the caching allocator is not reusing memory.
ALLOC_NAMES = frozenset({"cudaMalloc", "cuMemAlloc_v2", "hipMalloc", "hipExtMallocWithFlags", "cudaMallocHost", "hipHostMalloc"})
# Kineto names a copy ``Memcpy HtoD (Pageable -> Device)``: a pageable side makes it synchronous.
PAGEABLE_MARK = "Pageable"

# --- communication kernels ------------------------------------------------------------------------------
COMM_KERNEL_PREFIXES = ("ncclKernel", "ncclDevKernel", "mscclKernel", "nvshmem")  # NCCL < 2.19, >= 2.19 / RCCL
_COMM_SUBSTRINGS = (
    "deep_ep::", "deepep", "internode::dispatch", "internode::combine", "intranode::dispatch",
    "intranode::combine", "cross_device_reduce", "all_reduce", "allreduce", "all_gather", "allgather",
    "reduce_scatter", "reducescatter", "alltoall",
)


def is_comm_kernel(name: str) -> bool:
    """A collective or point-to-point communication kernel (NCCL/RCCL, MSCCL, NVSHMEM, DeepEP, custom)."""
    if name.startswith(COMM_KERNEL_PREFIXES):
        return True
    low = name.lower()
    return any(s in low for s in _COMM_SUBSTRINGS)


# --- kernel classes (device time by kind of work) ---------------------------------------------------------
KERNEL_CLASSES = ("gemm", "conv", "communication", "elementwise", "reduction_norm", "memcpy", "memset", "other")
_GEMM = re.compile(
    r"gemm|cutlass|cublas|sm\d+_xmma|xmma_|wgmma|nvjet|Cijk_|matmul|_mma_|ck::|ck16tensor_operation|gemv|splitK|bmm",
    re.IGNORECASE,
)
_CONV = re.compile(r"conv|cudnn|winograd|miopen|fft2d|dgrad|wgrad|fprop", re.IGNORECASE)
_REDUCTION = re.compile(r"reduce_kernel|softmax|norm|reduction|argmax|topk|sort|scan", re.IGNORECASE)
_ELEMENTWISE = re.compile(
    r"elementwise|vectorized|unrolled|Functor|fill|copy_kernel|CatArrayBatchedCopy|SubTensorOp|transpose|"
    r"multi_tensor_apply|relu|gelu|silu|sigmoid|tanh|dropout",
    re.IGNORECASE,
)


def kernel_name_head(name: str) -> str:
    """The name without its argument list and return type (``void f<...>(args)`` -> ``f<...>``)."""
    head = name.split("(", 1)[0]
    return head[5:] if head.startswith("void ") else head


def kernel_class(cat: str, name: str) -> str:
    """The class of one device event (one of ``KERNEL_CLASSES``)."""
    if cat in MEMCPY_CATEGORIES:
        return "memcpy"
    if cat in MEMSET_CATEGORIES:
        return "memset"
    if is_comm_kernel(name):
        return "communication"
    head = kernel_name_head(name)
    if _CONV.search(head) and not head.startswith("Cijk_"):
        return "conv"
    if _GEMM.search(head):
        return "gemm"
    if _REDUCTION.search(head):
        return "reduction_norm"
    if _ELEMENTWISE.search(head):
        return "elementwise"
    return "other"


# --- host-side names ----------------------------------------------------------------------------------------
GLOO_COLLECTIVE_PREFIX = "gloo:"  # host-side collectives of the gloo backend (user_annotation)
DATALOADER_NEXT_PREFIX = "enumerate(DataLoader)"  # the training loop waiting for its next batch
# Backward ops run on autograd's own thread, each inside one of these: that thread is doing work.
AUTOGRAD_PREFIX = "autograd::engine::evaluate_function"
