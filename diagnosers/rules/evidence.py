"""How much the evidence can carry: enough steps for a pattern, and what one rank's trace bounds.

Two questions, asked before the rules' verdict becomes "healthy" (thresholds.py gives each number's reason):

* **Too little evidence.** A cause is a pattern, told from noise only over ``MIN_PATTERN_STEPS`` steps (or
  windows of a step-less trace) that each hold evidence: on a GPU trace at least ``MIN_KERNELS_PER_STEP``
  kernels. A rank with fewer such steps cannot show a cause, nor its absence: one 13-second step of set-up, two
  steps of 14 kernels. A job whose step log (``steps.jsonl``) holds at least ``MIN_PATTERN_STEPS`` steps still
  shows its step times (spikes, slow steps) beyond a short trace window, so a short window alone is not
  "too little" when the log is there.
* **The peer bound.** On a rank's own trace, device idle plus exposed communication (GPU) or time inside
  collectives (CPU) is the most that anything outside the rank can cost it (``PEER_BOUND_SHARE``). When it is
  under the smallest cause worth naming, a single rank's view of a multi-rank job, and on a GPU trace even a
  short one, can be called healthy: whatever the evidence lacks cannot cost a tenth of a step.
"""

from __future__ import annotations

from pydantic import BaseModel

from diageval.bundle.trace_summary import StepSummary
from diageval.diagnosers.rules import thresholds as T
from diageval.diagnosers.rules.inputs import RunEvidence
from diageval.diagnosers.rules.stats import median


class RankReach(BaseModel):
    """What one rank's trace can carry."""

    rank: int
    units: int  # steps or windows
    counted: int  # of them, those holding enough evidence to show a pattern
    kernels: int  # device events in the counted units
    logged_steps: int  # rows of steps.jsonl for the rank
    on_device: bool
    peer_bound: float | None  # median share of a unit: device idle + exposed comm (GPU), collectives (CPU)
    unit_name: str

    @property
    def enough(self) -> bool:
        if self.counted >= T.MIN_PATTERN_STEPS:
            return True
        return not self.on_device and self.logged_steps >= T.MIN_PATTERN_STEPS

    def describe(self) -> str:
        what = f"{self.counted} of {self.units} {self.unit_name}"
        if self.unit_name == "windows":
            what += " (no ProfilerStep markers: equal windows of the span with device work)"
        if self.on_device:
            what += f" with at least {T.MIN_KERNELS_PER_STEP} kernels ({self.kernels} kernels in them)"
        return f"rank {self.rank}: {what}"


def _counts(st: StepSummary, on_device: bool) -> bool:
    if st.dur_us <= 0:
        return False
    return not on_device or st.kernels >= T.MIN_KERNELS_PER_STEP


def _peer_share(st: StepSummary, on_device: bool) -> float:
    if on_device and st.gpu is not None:
        idle = max(0.0, st.dur_us - st.gpu.device_busy_us)
        return min(1.0, (idle + st.gpu.comm_exposed_us) / st.dur_us)
    return min(1.0, st.collective_us / st.dur_us)


def reach(ev: RunEvidence, bounds: dict[int, float] | None = None) -> list[RankReach]:
    """``bounds``: rank -> its peer bound measured otherwise (a time table's idle plus exposed communication over all
    its time, which a median over units would hide when the idle sits in a few of them)."""
    bounds = bounds or {}
    rows = []
    for rank, s in sorted(ev.traces.items()):
        units = ev.units(rank)
        on_device = s.has_device
        counted = [st for st in units if _counts(st, on_device)]
        shares = [_peer_share(st, on_device) for st in counted]  # a unit without evidence bounds nothing
        if ev.windowed(rank) and not on_device:
            shares = []  # windows of a CPU trace do not measure collectives: nothing is bounded
        rows.append(RankReach(
            rank=rank,
            units=len(units),
            counted=len(counted),
            kernels=sum(st.kernels for st in counted),
            logged_steps=len(ev.step_log.get(rank, [])),
            on_device=on_device,
            peer_bound=bounds[rank] if rank in bounds else median(shares) if shares else None,
            unit_name=ev.unit_name(rank),
        ))
    return rows


def too_little_evidence(rows: list[RankReach], tables: dict[int, list[str]] | None = None) -> str | None:
    """Why the traces are too thin to tell a cause from noise, or None when every rank has enough.

    ``tables``: rank -> why its time table cannot separate a cause from its absence (``attributed.thin_parts``), for
    the ranks with device events: those are judged by the repeated units their table holds, not by a step count."""
    tables = tables or {}
    counted = [r for r in rows if r.rank not in tables and not r.enough]
    parts = [f"rank {rank}: " + "; ".join(why) for rank, why in sorted(tables.items()) if why]
    if counted:
        parts.append("; ".join(r.describe() for r in counted) + f" (a pattern needs {T.MIN_PATTERN_STEPS})")
    if not rows or not parts:
        return None
    return "too little evidence to tell a cause from noise: " + "; ".join(parts)


def bounded_below_a_cause(rows: list[RankReach]) -> bool:
    """Every rank's peer bound is under ``PEER_BOUND_SHARE`` (and measured): nothing outside can cost a cause."""
    return bool(rows) and all(r.peer_bound is not None and r.peer_bound < T.PEER_BOUND_SHARE for r in rows)


def describe_bound(rows: list[RankReach]) -> str:
    parts = [
        f"rank {r.rank}: {'device idle + exposed communication' if r.on_device else 'time inside collectives'}"
        f" {r.peer_bound:.0%} (median over its {r.unit_name})"
        for r in rows if r.peer_bound is not None
    ]
    return "; ".join(parts) or "no rank's trace measures what its peers could cost it"


__all__ = ["RankReach", "reach", "too_little_evidence", "bounded_below_a_cause", "describe_bound"]
