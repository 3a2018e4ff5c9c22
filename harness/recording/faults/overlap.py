"""Exposed communication: gradient all-reduce that could overlap with backward but runs after it
(``comm.exposed_communication``).

DistributedDataParallel all-reduces gradients in buckets while backward is still computing the
earlier layers, so most of the communication hides behind compute. Here a share of the parameters
(``exposed_fraction`` of the gradient bytes, taken from the layers backward reaches first: the ones
whose all-reduce DDP would overlap with the rest of backward, as when a
training script takes parameters out of DDP, e.g. with ``_set_params_and_buffers_to_ignore_for_model``,
and synchronises them itself) is left out of DDP and all-reduced by hand after backward, in one
blocking call on a flat buffer. The same bytes cross the same network at the same bandwidth; only the
overlap is lost. Every rank does it (it is the training script's code, not a rank's condition).

Decided here:

* The hand-made sync runs as an autograd final callback (queued from the first gradient hook of each
  backward), so it starts when backward has ended, wherever the workload calls ``backward()``.
* DDP must keep at least one parameter (it refuses a model with none): the first in model order (the
  input side, reached last by backward, whose all-reduce DDP runs after backward anyway) stays with it.
* Workloads that already sync after backward (``convnet_allreduce``) have nothing to expose; the check
  refuses them.

Nothing names it: the ops it adds (a flatten, one ``all_reduce``, a copy back) are the ops any
hand-written gradient sync shows.
"""

from __future__ import annotations

from typing import Any

from diageval.recording.faults.base import LiveFault


def exposed_parameters(named: list[tuple[str, Any]], fraction: float) -> list[tuple[str, Any]]:
    """The parameters holding ``fraction`` of the gradient bytes, from the output side (reverse model
    order: the ones backward reaches first); never the first in model order (DDP keeps it)."""
    trainable = [(n, p) for n, p in named if p.requires_grad]
    total = sum(p.numel() for _, p in trainable)
    chosen, taken = [], 0
    for name, p in reversed(trainable[1:]):
        if taken >= fraction * total:
            break
        chosen.append((name, p))
        taken += p.numel()
    return chosen


class ExposedCommunication(LiveFault):
    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self.exposed: list[Any] = []
        self.queued = False

    def model(self, model: Any) -> Any:
        chosen = exposed_parameters(list(model.named_parameters()), self.params.exposed_fraction)
        if not chosen:
            return model
        model._ddp_params_and_buffers_to_ignore = [name for name, _ in chosen]
        self.exposed = [p for _, p in chosen]
        for p in self.exposed:
            p.register_hook(self._on_grad)
        return model

    def _on_grad(self, grad: Any) -> Any:
        if not self.queued:
            from torch.autograd import Variable

            self.queued = True
            Variable._execution_engine.queue_callback(self._sync)
        return grad

    def _sync(self) -> None:
        import torch.distributed as dist
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

        self.queued = False
        grads = [p.grad for p in self.exposed if p.grad is not None]
        if not grads:
            return
        flat = _flatten_dense_tensors(grads)
        dist.all_reduce(flat)
        flat /= self.ctx.world_size
        for g, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
            g.copy_(synced)
