"""Compute-side faults: a straggler rank, many tiny ops, and a one-off pause (a confounder).

* ``slow_rank``: on ``target_rank``, from ``start_step`` on, each parametrised layer's forward is
  followed by a busy wait of ``(slowdown_factor - 1) * 3 * (its forward time)``; 3x because backward
  costs about twice the forward, so the whole compute of the step grows by about ``slowdown_factor``
  while the ops themselves, their shapes and their count stay the same (a throttled device). Busy, not
  asleep, so the rank's CPU use looks like compute. Its peers wait for it inside the collective.
* ``kernel_launch_overhead``: every Linear/Conv2d layer runs as ``pieces_per_layer`` calls over slices
  of the batch, concatenated: the same math as many small ops, so per-op dispatch dominates the step.
* ``one_off_pause``: every rank stalls ``pause_ms`` at the start of ``pause_step`` (a host hiccup, a
  slow first step); a benign anomaly, used in confounder cases labeled healthy.
"""

from __future__ import annotations

import time
from typing import Any

from diageval.faults.base import LiveFault

_BACKWARD_AND_FORWARD = 3.0


def _busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _param_layers(model: Any) -> list[Any]:
    return [m for m in model.modules() if not list(m.children()) and any(True for _ in m.parameters(recurse=False))]


class SlowRank(LiveFault):
    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self._active = False
        self._started: dict[int, float] = {}

    def model(self, model: Any) -> Any:
        if self.ctx.rank != self.params.target_rank:
            return model
        extra = (self.params.slowdown_factor - 1.0) * _BACKWARD_AND_FORWARD
        for layer in _param_layers(model):
            layer.register_forward_pre_hook(self._pre)
            layer.register_forward_hook(lambda mod, inp, out, extra=extra: self._post(mod, extra))
        return model

    def _pre(self, module: Any, inputs: Any) -> None:
        if self._active:
            self._started[id(module)] = time.perf_counter()

    def _post(self, module: Any, extra: float) -> None:
        start = self._started.pop(id(module), None)
        if start is not None:
            _busy_wait(extra * (time.perf_counter() - start))

    def on_step_start(self, step: int) -> None:
        self._active = step >= self.params.start_step


def _sliced(forward: Any, pieces: int) -> Any:
    import torch

    def run(x: Any) -> Any:
        n = x.shape[0]
        size = max(1, -(-n // pieces))
        return torch.cat([forward(x[i:i + size]) for i in range(0, n, size)], dim=0)

    return run


class KernelLaunchOverhead(LiveFault):
    def model(self, model: Any) -> Any:
        from torch import nn

        for layer in model.modules():
            if isinstance(layer, (nn.Linear, nn.Conv2d)):
                layer.forward = _sliced(layer.forward, self.params.pieces_per_layer)
        return model


class OneOffPause(LiveFault):
    def on_step_start(self, step: int) -> None:
        if step == self.params.pause_step:
            time.sleep(self.params.pause_ms / 1000)
