"""CUDA-only faults: host/device synchronisation in the loop, pageable host-to-device copies, and the
caching allocator emptied every step. They need a CUDA device (``backends = ("nccl",)``; on CPU they
refuse to start, and cases using them say ``requires: {device: cuda}``).

* ``host_device_sync``: after the forward of each of the first ``syncs_per_step`` parametrised layers,
  the host waits for the device: ``out.reshape(-1)[0].item()`` (a scalar read: ``aten::item``, a
  device-to-host copy into pageable memory, the stream synchronised) or ``torch.cuda.synchronize()``.
  Both are what a training loop that logs or branches on a device value does; the device idles while the
  host waits, then the host has to refill an empty queue.
* ``pageable_copies``: before the forward of each of the first ``copies_per_step`` parametrised layers,
  ``copy_mb`` MB of per-step host data held in ordinary (pageable, not pinned) memory are copied to the
  device with ``non_blocking=True``. A copy from pageable memory is staged by the driver and makes the host
  wait until the work already queued on the stream has finished (PyTorch's ``pin_memory``/``non_blocking``
  tutorial), so the asynchronous copy is not: a host/device synchronisation in disguise.
* ``allocator_churn``: ``torch.cuda.empty_cache()`` at the start of every ``empty_every_steps``-th step,
  so the caching allocator hands its free blocks back to the driver and the next step requests them again
  (``cudaMalloc`` inside the step; ``cudaFree``, which synchronises the device, at the next empty), as a
  loop that empties the cache "to save memory" does. (``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` has the same
  effect but must be set before the rank's first CUDA allocation, which happens before faults are built.)

None adds an annotation or a name of its own to the trace: the ops, copies and runtime calls are the ones
such code produces. Written from the torch.cuda documentation; exercised only where a GPU is lent
(``scripts/gpu-check.sh``, ``pytest -m gpu``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from diageval.recording.faults.base import LiveFault


def _param_layers(model: Any) -> list[Any]:
    return [m for m in model.modules() if not list(m.children()) and any(True for _ in m.parameters(recurse=False))]


class _CudaFault(LiveFault):
    backends: ClassVar[tuple[str, ...]] = ("nccl",)

    def __init__(self, params, ctx):
        if not ctx.is_cuda:
            raise RuntimeError(f"this fault acts on a CUDA device; the rank runs on {ctx.device}")
        super().__init__(params, ctx)


class HostDeviceSync(_CudaFault):
    def model(self, model: Any) -> Any:
        import torch

        def wait(mod: Any, inp: Any, out: Any) -> None:
            if self.params.sync_call == "item":
                out.reshape(-1)[0].item()
            else:
                torch.cuda.synchronize()

        for layer in _param_layers(model)[: self.params.syncs_per_step]:
            layer.register_forward_hook(wait)
        return model


class PageableCopies(_CudaFault):
    def model(self, model: Any) -> Any:
        import torch

        floats = max(1, int(self.params.copy_mb * (1 << 20) / 4))
        host = torch.randn(floats)  # ordinary host memory: not pinned
        device = torch.device(self.ctx.device)

        def copy(mod: Any, inp: Any) -> None:
            host.to(device, non_blocking=True)

        for layer in _param_layers(model)[: self.params.copies_per_step]:
            layer.register_forward_pre_hook(copy)
        return model


class AllocatorChurn(_CudaFault):
    def on_step_start(self, step: int) -> None:
        import torch

        if step % self.params.empty_every_steps == 0:
            torch.cuda.empty_cache()
