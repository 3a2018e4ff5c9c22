"""Compute-side faults: a straggler rank, many tiny ops, and a one-off pause (a confounder).

* ``slow_rank``: on ``target_rank``, from ``start_step`` on, each parametrised layer's forward and
  backward are followed by a busy wait of ``(slowdown_factor - 1)`` times their own duration (roughly,
  for backward: the time since the previous gradient hook), so the
  layers' compute takes ``slowdown_factor`` times as long while the ops, their shapes and their count stay
  the same (a throttled device). Busy, not asleep, so the rank's CPU use looks like compute. Its peers
  wait for it inside the collective. (Optimizer, data and communication time are not scaled.)
* ``kernel_launch_overhead``: every leaf layer (linear, conv, activation, pooling; not batch-norm or
  dropout) runs as ``pieces_per_layer`` calls over slices of the batch, concatenated: the same math as
  many small ops, so per-op dispatch dominates the step.
* ``one_off_pause``: every rank stalls ``pause_ms`` at the start of ``pause_step`` (a host hiccup, a
  slow first step); a benign anomaly, used in confounder cases labeled healthy.
"""

from __future__ import annotations

import time
from typing import Any

from diageval.recording.faults.base import LiveFault


def _busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _param_layers(model: Any) -> list[Any]:
    return [m for m in model.modules() if not list(m.children()) and any(True for _ in m.parameters(recurse=False))]


class SlowRank(LiveFault):
    """Forward: module pre/post hooks time each layer and busy-wait after it. Backward: gradient hooks on
    the parameters busy-wait in proportion to the backward time since the previous hook (or since the
    forward ended). Neither kind of hook adds an op to the trace (full module backward hooks would add
    ``BackwardHookFunction`` nodes on this rank only, a giveaway)."""

    def __init__(self, params, ctx):
        super().__init__(params, ctx)
        self._active = False
        self._started: dict[int, float] = {}
        self._mark = 0.0

    def model(self, model: Any) -> Any:
        if self.ctx.rank != self.params.target_rank:
            return model
        for layer in _param_layers(model):
            layer.register_forward_pre_hook(lambda mod, inp: self._begin(mod))
            layer.register_forward_hook(lambda mod, inp, out: self._end(mod))
            for p in layer.parameters(recurse=False):
                if p.requires_grad:
                    p.register_hook(self._on_grad)
        return model

    def _stretch(self, elapsed: float) -> None:
        _busy_wait((self.params.slowdown_factor - 1.0) * elapsed)
        self._mark = time.perf_counter()

    def _begin(self, module: Any) -> None:
        if self._active:
            self._started[id(module)] = time.perf_counter()

    def _end(self, module: Any) -> None:
        start = self._started.pop(id(module), None)
        if start is not None:
            self._stretch(time.perf_counter() - start)

    def _on_grad(self, grad: Any) -> None:
        if self._active and self._mark:
            self._stretch(time.perf_counter() - self._mark)

    def on_step_start(self, step: int) -> None:
        self._active = step >= self.params.start_step
        self._mark = 0.0


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

        # Layers whose output for one sample depends on other samples (batch statistics) or on RNG
        # order cannot be sliced without changing the math; everything else can.
        batch_coupled = (nn.modules.batchnorm._BatchNorm, nn.Dropout, nn.modules.dropout._DropoutNd)
        for layer in model.modules():
            if not list(layer.children()) and not isinstance(layer, batch_coupled):
                layer.forward = _sliced(layer.forward, self.params.pieces_per_layer)
        return model


class OneOffPause(LiveFault):
    def on_step_start(self, step: int) -> None:
        if step == self.params.pause_step:
            time.sleep(self.params.pause_ms / 1000)
