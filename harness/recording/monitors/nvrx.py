"""nvidia-resiliency-ext's straggler detection, in the job: its section timers scored by its own
``ReportGenerator`` (relative scores against the fastest rank, individual scores against the rank's own
best window), every :data:`REPORT_EVERY` steps; rank 0 writes each report as one JSON line to
``monitor/nvrx-reports.jsonl``.

Decided here (the tool leaves them to its user):

* Sections, as NVIDIA's Lightning callback places them: ``forward`` (its callback wraps the strategy's
  ``training_step``: the forward pass and the loss, not the backward pass, whose gradient all-reduce would
  make every rank wait for the slowest) and ``step`` (the whole loop iteration). Times are CPU wall
  milliseconds, as ``Detector.detection_section`` measures them (``perf_counter_ns``).
* On CUDA the sections are the Detector's own (``straggler.Detector.detection_section``, entered and left
  at the hook's boundaries) and each report is ``Detector.generate_report()``: section scores and GPU
  scores from its CUPTI kernel times. Without CUDA the Detector cannot start: it loads its CUPTI
  extension (``libcupti.so.12``) at ``initialize`` and calls ``torch.cuda.synchronize`` in
  ``generate_report``. So on CPU the section times are kept here (what ``detection_section`` keeps: the
  elapsed times since the last report) and handed to the same ``ReportGenerator`` the Detector uses,
  with no kernel summaries, and the report's GPU fields stay empty. The CUDA path is checked by the
  ``gpu``-marked test in ``tests/recording/test_monitors.py`` (``scripts/gpu-check.sh`` runs it); it has not run
  on a GPU yet.
* Reporting interval: the Detector's own tracker aims at one report per 60 s (16 steps to estimate),
  longer than a whole recorded job; :data:`REPORT_EVERY` steps instead, so a 20-40-step job gets 4-8
  reports, each a median over 5 steps, and individual scores have earlier windows to compare with.
* Thresholds: ``Report.identify_stragglers``'s defaults (0.75: a rank at least 1/0.75 = 1.33x slower).
* No node names: every rank reports the node ``node`` (the machine's host name says nothing of use here).
"""

from __future__ import annotations

import json
import math
from typing import Any

from diageval.recording.monitors.hooks import MonitorContext, StepMonitor, StepPhases

REPORT_EVERY = 5
REPORTS_FILE = "nvrx-reports.jsonl"
SECTIONS = ("forward", "step")


def section_summaries(times: dict[str, list[float]]) -> dict[str, dict[Any, float]]:
    """What ``Detector._get_section_summaries`` computes from a section's elapsed times (ms)."""
    import torch
    from nvidia_resiliency_ext.straggler.statistics import Statistic

    out = {}
    for name, values in times.items():
        if not values:
            continue
        t = torch.tensor(values, dtype=torch.float64)
        out[name] = {
            Statistic.MIN: torch.min(t).item(), Statistic.MAX: torch.max(t).item(),
            Statistic.MED: torch.median(t).item(), Statistic.AVG: torch.mean(t).item(),
            Statistic.STD: torch.std(t).item() if len(values) > 1 else float("nan"), Statistic.NUM: len(values),
        }
    return out


def _scores(by_section: Any) -> dict[str, dict[str, float | None]]:
    return {s: {str(r): (None if math.isnan(v) else v) for r, v in ranks.items()} for s, ranks in by_section.items()}


class NvrxStragglerMonitor(StepMonitor):
    def __init__(self, ctx: MonitorContext):
        super().__init__(ctx)
        self.detector = None  # straggler.Detector on CUDA; else the ReportGenerator below
        self.open: dict[str, object] = {}  # the Detector's sections entered and not yet left
        if ctx.device.startswith("cuda"):
            from nvidia_resiliency_ext.straggler import Detector

            Detector.initialize(scores_to_compute="all", gather_on_rank0=True, profiling_interval=1, node_name="node")
            self.detector = Detector
        else:
            from nvidia_resiliency_ext.straggler.reporting import ReportGenerator

            self.generator = ReportGenerator(scores_to_compute=["relative_perf_scores", "individual_perf_scores"],
                                             gather_on_rank0=True, node_name="node")
        self.times: dict[str, list[float]] = {s: [] for s in SECTIONS}
        self.window_start = 0
        self.last_step = -1

    # the Detector's own sections (CUDA only), entered and left at the hook's boundaries
    def section_enter(self, name: str) -> None:
        if self.detector is not None and name not in self.open:
            cm = self.detector.detection_section(name, profile_cuda=True)
            cm.__enter__()
            self.open[name] = cm

    def section_exit(self, name: str) -> None:
        cm = self.open.pop(name, None)
        if cm is not None:
            cm.__exit__(None, None, None)

    def on_step(self, phases: StepPhases) -> None:
        if phases.forward_ms is not None:
            self.times["forward"].append(phases.forward_ms)
        self.times["step"].append(phases.step_ms)
        self.last_step = phases.step
        if (phases.step + 1) % REPORT_EVERY == 0:
            self._report(phases.step + 1)

    def finish(self, failed: bool) -> None:
        for name in list(self.open):
            self.section_exit(name)
        if not failed and self.last_step + 1 > self.window_start:  # the last, shorter window
            self._report(self.last_step + 1)
        if self.detector is not None:
            self.detector.shutdown()

    def _report(self, stop: int) -> None:
        if self.detector is not None:
            report = self.detector.generate_report()  # a collective on every rank
        else:
            report = self.generator.generate_report(section_summaries(self.times), {})  # a collective on every rank
        start, self.window_start = self.window_start, stop
        self.times = {s: [] for s in SECTIONS}
        if report is None:  # not rank 0
            return
        found = report.identify_stragglers()
        line = {
            "steps": [start, stop],
            "section_relative_perf_scores": _scores(report.section_relative_perf_scores),
            "section_individual_perf_scores": _scores(report.section_individual_perf_scores),
            "gpu_relative_perf_scores": {str(r): v for r, v in report.gpu_relative_perf_scores.items() if not math.isnan(v)},
            "straggler_sections_relative": {s: sorted(i.rank for i in ids) for s, ids in found["straggler_sections_relative"].items()},
            "straggler_sections_individual": {s: sorted(i.rank for i in ids) for s, ids in found["straggler_sections_individual"].items()},
            "straggler_gpus_relative": sorted(i.rank for i in found["straggler_gpus_relative"]),
            "straggler_gpus_individual": sorted(i.rank for i in found["straggler_gpus_individual"]),
        }
        with open(self.ctx.out_dir / REPORTS_FILE, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
