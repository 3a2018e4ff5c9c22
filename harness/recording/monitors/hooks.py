"""The one hook that installs an in-job monitor into a recorded rank, the same for every case.

The rank worker (:mod:`diageval.recording.rank_worker`) calls, for a recording made with a monitor:

* :func:`install_monitor` once, right after the process group is up and **before** the workload and
  the fault injectors are built (so no injector object exists yet when the monitor's code runs first);
* :meth:`InstalledMonitor.step_start`, :meth:`~InstalledMonitor.batch_requested`,
  :meth:`~InstalledMonitor.batch_ready` and :meth:`~InstalledMonitor.step_end` around each step of the
  shared loop (step start, just before and just after the DataLoader hands over the batch, step end after
  the step's timer stopped);
* :meth:`InstalledMonitor.finish` once after the loop (``failed=True`` when the job failed in a step:
  the monitor must not start a collective then, its peers may be gone).

What a monitor is given (:class:`MonitorContext`): its rank, the world size, the device and the folder
its raw output goes to (``monitor/`` of the bundle being written). Not the case id, the workload's name
or params, the step count, the faults or their params. Before it is constructed every ``DIAGEVAL_*``
variable is removed from the rank's environment (they name the cache and the case folder, where the
labels are), ``sys.argv`` is cut to the program's name (a rank inherits the harness's command line, which
may name cases). The working directory stays the harness's (the recorder's paths may be relative to
it), and the file system is the rank's: that is part of what the trust note below accepts.
``tests/recording/test_monitors.py`` checks each route with a probe monitor that records everything it is handed
and everything the process shows it (environment, argv, the context, its output folder).

Trust (decided here, the issue is silent): the monitor's code runs inside the training process, which
also holds the injector once it is built, and it runs unboxed, as the recorded job does (a box would
change the timing the cases are verified by). Python cannot fence one object from another in one process:
a monitor that walks the interpreter's frames could find the rank's plan, one that opens files could read
the case folder. What is guarded is what a monitor is *handed* (above, tested). So only the monitors of the
harness's own registry (:data:`diageval.recording.monitors.MONITORS`) can be installed, never a spec a
user passes; their in-job code only times the loop and calls the tool's own scoring, and it writes raw
measurements, not a diagnosis. The diagnosis is made afterwards from that raw output by the monitor's
diagnoser adapter (``diageval.diagnosers.monitors``), which runs boxed like every other diagnoser and sees
the bundle's ``monitor/`` files.

The phase clock (:class:`PhaseClock`) times what a step-loop monitor times (TraceML's phases; NVIDIA's
section timers are placed at the same boundaries): the wait for the batch (from the loop hooks), the
outermost module forward (torch's global module hooks), the optimizer step (torch's global optimizer
hooks) and, as ``backward``, the span between the last forward's end and the optimizer step (the loss,
the backward pass and gradient communication). Only public torch hooks, no patching.

A monitor that raises is switched off for the rest of the job and its error is written to
``monitor/error-rank<N>.txt`` (its adapter then fails the case as the diagnoser's error); the job
itself goes on, so a broken monitor never becomes a recording failure.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HIDDEN_ENV_PREFIX = "DIAGEVAL_"  # the harness's own settings: they name the bundle cache and the cases
MONITOR_DIR = "monitor"  # the folder of a bundle that holds a monitor's raw output


@dataclass(frozen=True)
class MonitorContext:
    """Everything a monitor is handed: what a monitor in a production job knows about itself."""

    rank: int
    world_size: int
    device: str  # "cpu" or "cuda:<index>"
    out_dir: Path  # the monitor's raw output folder (``monitor/`` of the bundle being written)


@dataclass
class StepPhases:
    """One step's phase durations in milliseconds (None: not seen in that step)."""

    step: int
    step_ms: float
    input_wait_ms: float
    forward_ms: float | None
    backward_ms: float | None
    optimizer_ms: float | None


class StepMonitor:
    """An in-job monitor's in-process part. Subclasses override what they need; all default to nothing."""

    def __init__(self, ctx: MonitorContext):
        self.ctx = ctx

    def section_enter(self, name: str) -> None:
        """A timed section starts: ``step`` (at step start) or ``forward`` (the outermost module forward), for a
        tool that times sections itself (nvrx's Detector on CUDA)."""

    def section_exit(self, name: str) -> None:
        """That section ends (``step``: at step end, before :meth:`on_step`)."""

    def on_step(self, phases: StepPhases) -> None:
        """Called at every step end with the step's phases (after the step's timer stopped)."""

    def finish(self, failed: bool) -> None:
        """Called once after the loop; ``failed``: the job failed in a step (no collectives now)."""


@dataclass
class PhaseClock:
    """Per-step phase timing through torch's global module and optimizer hooks (see the module docstring)."""

    step_t0: float = 0.0
    request_t: float = 0.0
    batch_t: float = 0.0
    forward_ms: float = 0.0
    forward_seen: bool = False
    last_forward_end: float | None = None
    optimizer_ms: float = 0.0
    optimizer_seen: bool = False
    backward_ms: float = 0.0
    _depth: int = 0
    _forward_t0: float = 0.0
    _optimizer_t0: float = 0.0
    _handles: list[Any] = field(default_factory=list)
    listener: Any = None  # told when the outermost forward starts and ends (section_enter/section_exit)

    def attach(self) -> None:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._handles = [
            register_module_forward_pre_hook(self._forward_pre),
            register_module_forward_hook(self._forward_post),
            register_optimizer_step_pre_hook(self._optimizer_pre),
            register_optimizer_step_post_hook(self._optimizer_post),
        ]

    def detach(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def _forward_pre(self, module: Any, args: Any) -> None:
        if self._depth == 0:
            if self.listener is not None:
                self.listener.section_enter("forward")
            self._forward_t0 = time.perf_counter()
        self._depth += 1

    def _forward_post(self, module: Any, args: Any, output: Any) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth == 0:
            now = time.perf_counter()
            self.forward_ms += (now - self._forward_t0) * 1e3
            self.forward_seen = True
            self.last_forward_end = now
            if self.listener is not None:
                self.listener.section_exit("forward")

    def _optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._optimizer_t0 = time.perf_counter()
        if self.last_forward_end is not None:
            self.backward_ms += (self._optimizer_t0 - self.last_forward_end) * 1e3
            self.last_forward_end = None

    def _optimizer_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.optimizer_ms += (time.perf_counter() - self._optimizer_t0) * 1e3
        self.optimizer_seen = True

    def start(self) -> None:
        self.step_t0 = self.request_t = self.batch_t = time.perf_counter()
        self.forward_ms = self.optimizer_ms = self.backward_ms = 0.0
        self.forward_seen = self.optimizer_seen = False
        self.last_forward_end = None

    def phases(self, step: int) -> StepPhases:
        end = time.perf_counter()
        backward = self.backward_ms if self.optimizer_seen and self.forward_seen else None
        return StepPhases(step=step, step_ms=(end - self.step_t0) * 1e3, input_wait_ms=(self.batch_t - self.request_t) * 1e3,
                          forward_ms=self.forward_ms if self.forward_seen else None, backward_ms=backward,
                          optimizer_ms=self.optimizer_ms if self.optimizer_seen else None)


class InstalledMonitor:
    """What the rank worker holds: the monitor behind a guard (an error switches it off, see the docstring)."""

    def __init__(self, monitor: StepMonitor, ctx: MonitorContext):
        self.monitor: StepMonitor | None = monitor
        self.ctx = ctx
        self.clock = PhaseClock(listener=self)
        self.clock.attach()

    def _guard(self, fn: Any, *args: Any) -> None:
        if self.monitor is None:
            return
        try:
            fn(*args)
        except Exception:
            self._fail(traceback.format_exc())

    def _fail(self, text: str) -> None:
        self.monitor = None
        self.clock.detach()
        (self.ctx.out_dir / f"error-rank{self.ctx.rank}.txt").write_text(text, encoding="utf-8")

    def section_enter(self, name: str) -> None:
        if self.monitor is not None:
            self._guard(self.monitor.section_enter, name)

    def section_exit(self, name: str) -> None:
        if self.monitor is not None:
            self._guard(self.monitor.section_exit, name)

    def step_start(self, step: int) -> None:
        self.clock.start()
        self.section_enter("step")

    def batch_requested(self, step: int) -> None:
        self.clock.request_t = time.perf_counter()

    def batch_ready(self, step: int) -> None:
        self.clock.batch_t = time.perf_counter()

    def step_end(self, step: int) -> None:
        phases = self.clock.phases(step)
        self.section_exit("step")
        if self.monitor is not None:
            self._guard(self.monitor.on_step, phases)

    def finish(self, failed: bool) -> None:
        if self.monitor is not None:
            self._guard(self.monitor.finish, failed)
        self.clock.detach()


def scrub_environment() -> list[str]:
    """Remove every ``DIAGEVAL_*`` variable from this process's environment; the names removed."""
    gone = [k for k in os.environ if k.startswith(HIDDEN_ENV_PREFIX)]
    for k in gone:
        del os.environ[k]
    return gone


def install_monitor(name: str, *, rank: int, world_size: int, device: str, bundle_dir: Path) -> InstalledMonitor:
    """Build the registry's monitor ``name`` for this rank (see the module docstring for what it gets).

    Raises KeyError naming the known monitors when ``name`` is not one.
    """
    from diageval.recording.monitors import MONITORS

    if name not in MONITORS:
        raise KeyError(f"no in-job monitor named {name!r}; known: {', '.join(sorted(MONITORS))}")
    scrub_environment()
    out = Path(bundle_dir) / MONITOR_DIR
    out.mkdir(parents=True, exist_ok=True)
    sys.argv = sys.argv[:1]
    ctx = MonitorContext(rank=rank, world_size=world_size, device=device, out_dir=out)
    try:
        monitor = MONITORS[name].load()(ctx)
    except Exception:
        installed = InstalledMonitor(StepMonitor(ctx), ctx)
        installed._fail(traceback.format_exc())
        return installed
    return InstalledMonitor(monitor, ctx)
