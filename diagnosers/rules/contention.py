"""Do processes outside the job take a CPU rank's cores (``host.cpu_contention``)?

The loop's slowness is the symptom (its DataLoader waits longer, its ops take longer); the cause is that the rank is
runnable and not running. A thread that is runnable but descheduled shows wall time without CPU time, and two
figures of the bundle measure the two separately:

* the trace: how long the rank's matrix products and convolutions took (the counted ops of ``work``: arithmetic
  with nothing to wait on, no I/O, no lock, no peer). With its cores to itself the rank spends all of that time on
  a CPU (more CPU than wall time with intra-op threads);
* ``metrics.jsonl``: the rank's CPU time (user + system, the rank process with its DataLoader workers) over each
  sampling interval, as a share of one core.

Over the samples whose intervals cover the rank's profiled steps, a rank that gets less CPU than its counted ops
alone took wall time was held off the core for at least the difference: that shortfall is time the step lost
outright (the same ops on a free core end that much sooner), so it is named against ``CONTENTION_SHARE`` (the
smallest loss worth naming) once told from none (``ABSENCE_SIGMAS``). Every other host state only makes the test
stricter: waiting for data, in a collective or on disk spends no CPU and counts in neither figure; workers' and
intra-op threads' CPU add to the rank's figure, never to the ops' time. So a job slowed by its loader, its disk or
a peer does not read as contention, and a competitor that takes only idle cycles (a niced batch job) leaves the
rank its CPU and no shortfall.

Judged only on ranks whose trace shows no accelerator: on a GPU rank an op's host time is a launch, not its
arithmetic. A trace without input shapes (no counted ops), without steps (``work`` is per profiler step), or a
bundle whose samples do not cover the profiled steps on the trace's clock gets no judgement here.

The error of the CPU share is the samples' own spread (every sample of the rank, as the spread of one) with the
reading's resolution (``CPU_TICK_S``) in quadrature, over the square root of the samples that cover the steps;
the ops' share has the ratio estimator's error over the steps (``attribution.ratio_standard_error``, the time
table's).
The samples' intervals are longer than a few profiled steps; the steps are taken to stand for the steps around
them, as every judge takes its profiled steps to stand for the job.
"""

from __future__ import annotations

import math

from pydantic import BaseModel

from diageval.bundle.attribution import ratio_standard_error
from diageval.diagnosers.rules import thresholds as T
from diageval.diagnosers.rules.inputs import CpuSample, RunEvidence
from diageval.diagnosers.rules.stats import claimable, graded_confidence, median
from diageval.diagnosis import Finding


class ContentionRow(BaseModel):
    rank: int
    steps: int
    ops_share: float  # the counted ops' wall time / the profiled steps' time
    se_ops: float
    cpu_share: float  # mean CPU share of one core over the samples covering the steps
    se_cpu: float
    samples: int  # samples covering the steps
    step_range: tuple[int, int] | None

    @property
    def shortfall(self) -> float:
        return self.ops_share - self.cpu_share

    @property
    def se(self) -> float:
        return math.hypot(self.se_ops, self.se_cpu)


def covering(samples: list[CpuSample], start_s: float, end_s: float) -> list[CpuSample]:
    """The samples whose interval (from the rank's previous sample, or one median spacing before the first) overlaps
    [start_s, end_s]."""
    if not samples:
        return []
    times = [s.time for s in samples]
    gaps = [b - a for a, b in zip(times, times[1:]) if b > a]
    first = median(gaps) if gaps else 0.0
    return [s for i, s in enumerate(samples) if (times[i - 1] if i else s.time - first) < end_s and s.time > start_s]


def measure_contention(ev: RunEvidence) -> list[ContentionRow]:
    rows = []
    for rank, s in sorted(ev.traces.items()):
        work = ev.work.get(rank) or {}
        samples = ev.cpu_samples.get(rank, [])
        units = [st for st in ev.units(rank) if st.dur_us > 0]
        if s.has_accelerator or s.has_device or not work or len(samples) < 2 or not units or ev.windowed(rank):
            continue
        inside = covering(samples, units[0].start_us / 1e6, (units[-1].start_us + units[-1].dur_us) / 1e6)
        if not inside:
            continue
        total = sum(st.dur_us for st in units)
        ops = [work[st.number].compute_us if st.number in work else 0.0 for st in units]
        share = sum(ops) / total
        n = len(units)
        se_ops = ratio_standard_error(ops, [st.dur_us for st in units])
        cpu = [x.share for x in samples]
        mean_all = sum(cpu) / len(cpu)
        spread = math.sqrt(sum((x - mean_all) ** 2 for x in cpu) / (len(cpu) - 1))
        interval = median([b.time - a.time for a, b in zip(samples, samples[1:]) if b.time > a.time] or [1.0])
        tick = T.CPU_TICK_S / math.sqrt(6) / max(interval, 1e-3)  # two truncated readings' difference
        rows.append(ContentionRow(
            rank=rank, steps=n, ops_share=share, se_ops=se_ops,
            cpu_share=sum(x.share for x in inside) / len(inside),
            se_cpu=math.hypot(spread, tick) / math.sqrt(len(inside)),
            samples=len(inside),
            step_range=ev.step_range(rank, units[0], units[-1]),
        ))
    return rows


def judge_contention(rows: list[ContentionRow], ev: RunEvidence) -> list[Finding]:
    out = []
    for r in rows:
        if r.shortfall <= 0 or r.shortfall < T.ABSENCE_SIGMAS * r.se:
            continue
        confidence = graded_confidence(r.shortfall, T.CONTENTION_SHARE, r.se)
        if not claimable(confidence):
            continue
        out.append(Finding(
            category="host.cpu_contention",
            confidence=confidence,
            ranks=[r.rank],
            steps=r.step_range,
            impact=round(min(1.0, r.shortfall), 3),
            summary=(f"rank {r.rank} is held off its cores: its matrix products and convolutions take {r.ops_share:.0%}"
                     f" of the step's wall time while the process gets {r.cpu_share:.0%} of a core, so at least"
                     f" {r.shortfall:.0%} of the step its ops were runnable and not running (other processes held the"
                     " CPU)"),
            evidence=[
                f"{ev.trace_file(r.rank)}: aten mm/addmm/bmm/convolution ops {r.ops_share:.0%} of {r.steps}"
                f" {ev.unit_name(r.rank)} (standard error {r.se_ops:.0%})",
                f"metrics.jsonl: rank {r.rank}'s CPU {r.cpu_share:.0%} of one core over the {r.samples} samples"
                f" covering those steps (standard error {r.se_cpu:.0%}); shortfall {r.shortfall:.0%}"
                f" (standard error {r.se:.0%})",
            ],
        ))
    return out
