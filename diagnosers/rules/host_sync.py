"""Is the host blocked in synchronising calls while the device has nothing to do?

Per profiler step of a GPU trace (``trace_stats``; windows of a step-less trace alike): the device idle time
while the host thread sits in a blocking runtime call. A ``.item()``, a ``.cpu()`` or a copy from pageable
memory in the loop stops the host from queuing the next kernels, so the device drains its queue and waits.
Time the device idles *while* the host blocks is lost to the synchronisation alone (a sync whose device
keeps computing costs nothing: the host merely waits for work that had to finish anyway).

Two causes share the measurement and differ by the call (taxonomy 1.2):

* ``host.device_sync``: device/stream/event synchronize, synchronous copies, async copies whose host side is
  pageable memory;
* ``memory.allocator_churn``: ``cudaFree``/``hipFree`` (each synchronises the device), with raw allocations
  (``cudaMalloc``/``hipMalloc``) beside them: memory handed back to the driver and requested again in the
  loop, where a caching allocator makes no such call after the first steps.

Either is a cause when the device idle under its calls reaches its cut (``SYNC_IDLE_SHARE``,
``CHURN_IDLE_SHARE``) with graded confidence, the calls recurring on ``PERSISTENT_SHARE`` of at least
``MIN_PATTERN_STEPS`` steps that each show it (from the cut's lower edge).
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from diageval.bundle.trace_summary import StepSummary
from diageval.diagnosers.rules import thresholds as T
from diageval.diagnosers.rules.inputs import RunEvidence
from diageval.diagnosers.rules.stats import claimable, graded_confidence, lower_edge, median, median_standard_error
from diageval.diagnosis import Finding

WHAT = {
    "sync": "device/stream/event synchronize calls",
    "sync_copy": "synchronous copies",
    "pageable_copy": "copies to or from pageable host memory (synchronous despite the async API)",
    "free": "cudaFree/hipFree calls (each synchronises the device)",
}
SYNC_KINDS = ("sync", "sync_copy", "pageable_copy")
CHURN_KINDS = ("free",)


class SyncRow(BaseModel):
    rank: int
    steps: int
    median_share: float  # device idle while the host blocks in these calls / step
    se: float
    median_idle_us: float
    median_step_us: float
    median_allocations: float
    median_launches: float
    by_kind: dict[str, tuple[float, float, float]]  # kind -> median (calls, host us, device idle us) per step
    flags: list[bool]
    step_range: tuple[int, int] | None
    unit_name: str
    unit: str


def _idle_under(st: StepSummary, kinds: tuple[str, ...]) -> float:
    """Device idle while the host blocks in calls of ``kinds``: the union over every kind, less the other kinds'
    own idle (calls of one host thread do not overlap, so the kinds' idle times add up to the union)."""
    g = st.gpu
    others = sum(b.device_idle_us for k, b in g.blocking.items() if k not in kinds)
    return max(0.0, min(g.blocking_device_idle_us - others, sum(g.blocking[k].device_idle_us for k in kinds if k in g.blocking)))


def measure_blocking(ev: RunEvidence, kinds: tuple[str, ...], cut: float) -> list[SyncRow]:
    rows = []
    for rank in sorted(ev.traces):
        steps = [st for st in ev.units(rank) if st.gpu is not None and st.dur_us > 0]
        if not steps:
            continue
        present = sorted({k for st in steps for k in st.gpu.blocking if k in kinds})
        by_kind = {
            k: (
                median([st.gpu.blocking[k].calls if k in st.gpu.blocking else 0 for st in steps]),
                median([st.gpu.blocking[k].host_us if k in st.gpu.blocking else 0.0 for st in steps]),
                median([st.gpu.blocking[k].device_idle_us if k in st.gpu.blocking else 0.0 for st in steps]),
            )
            for k in present
        }
        idle = [_idle_under(st, kinds) for st in steps]
        shares = [i / st.dur_us for i, st in zip(idle, steps)]
        flags = [x >= lower_edge(cut) and any(k in st.gpu.blocking for k in kinds) for x, st in zip(shares, steps)]
        first = next((st for st, f in zip(steps, flags) if f), None)
        rows.append(
            SyncRow(
                rank=rank,
                steps=len(steps),
                median_share=median(shares),
                se=median_standard_error(shares),
                median_idle_us=median(idle),
                median_step_us=median([st.dur_us for st in steps]),
                median_allocations=median([st.gpu.allocations for st in steps]),
                median_launches=median([st.gpu.launches for st in steps]),
                by_kind=by_kind,
                flags=flags,
                step_range=ev.step_range(rank, first, steps[-1]) if first is not None else None,
                unit_name=ev.unit_name(rank),
                unit=ev.unit_name(rank, plural=False),
            )
        )
    return rows


def measure_host_sync(ev: RunEvidence) -> list[SyncRow]:
    return measure_blocking(ev, SYNC_KINDS, T.SYNC_IDLE_SHARE)


def measure_allocator_churn(ev: RunEvidence) -> list[SyncRow]:
    return measure_blocking(ev, CHURN_KINDS, T.CHURN_IDLE_SHARE)


def _blocked(rows: list[SyncRow], cut: float) -> tuple[list[SyncRow], float]:
    hit = [r for r in rows if r.steps >= T.MIN_PATTERN_STEPS and sum(r.flags) >= T.PERSISTENT_SHARE * r.steps]
    graded = {r.rank: graded_confidence(r.median_share, cut, r.se) for r in hit}
    hit = [r for r in hit if claimable(graded[r.rank])]
    return hit, median([graded[r.rank] for r in hit]) if hit else 0.0


def _evidence(r: SyncRow, ev: RunEvidence) -> str:
    parts = [
        f"{k}: {c:.0f} calls, host {h / 1e3:.2f} ms, device idle {i / 1e3:.2f} ms"
        for k, (c, h, i) in sorted(r.by_kind.items(), key=lambda kv: -kv[1][2])
    ]
    return (
        f"{ev.trace_file(r.rank)}: per {r.unit} (median) the device idles {r.median_idle_us / 1e3:.2f} ms"
        f" ({r.median_share:.0%} of {r.median_step_us / 1e3:.1f} ms, standard error {r.se:.0%}) while the host blocks,"
        f" on {sum(r.flags)} of {r.steps} {r.unit_name}; " + "; ".join(parts)
        + f"; {r.median_allocations:.0f} raw allocations and {r.median_launches:.0f} launches per {r.unit}"
    )


def _step_range(hit: list[SyncRow]) -> tuple[int, int] | None:
    ranges = [r.step_range for r in hit if r.step_range is not None]
    return (min(a for a, _ in ranges), max(b for _, b in ranges)) if ranges else None


def _blocking_finding(
    rows: list[SyncRow], ev: RunEvidence, cut: float, category: str, summary: Callable[[list[SyncRow], float], str]
) -> list[Finding]:
    """The one finding host sync and allocator churn each make: the ranks whose device idles while the host blocks
    (over ``cut`` of the step), the median such share as impact; ``summary`` words it from the ranks hit and that
    share."""
    hit, confidence = _blocked(rows, cut)
    if not hit:
        return []
    share = median([r.median_share for r in hit])
    return [
        Finding(
            category=category,
            confidence=confidence,
            ranks=[r.rank for r in hit],
            steps=_step_range(hit),
            impact=round(min(1.0, share), 3),
            summary=summary(hit, share),
            evidence=[_evidence(r, ev) for r in hit],
        )
    ]


def _host_sync_summary(hit: list[SyncRow], share: float) -> str:
    top_kind = max(
        {k for r in hit for k in r.by_kind}, key=lambda k: sum(r.by_kind.get(k, (0, 0, 0))[2] for r in hit)
    )
    return (
        f"the host blocks in {WHAT.get(top_kind, top_kind)} every step while the device idles"
        f" ({share:.0%} of the step)"
    )


def judge_host_sync(rows: list[SyncRow], ev: RunEvidence) -> list[Finding]:
    return _blocking_finding(rows, ev, T.SYNC_IDLE_SHARE, "host.device_sync", _host_sync_summary)


def _churn_summary(hit: list[SyncRow], share: float) -> str:
    calls = median([r.by_kind.get("free", (0, 0, 0))[0] for r in hit])
    allocs = median([r.median_allocations for r in hit])
    return (
        f"memory goes back to the driver and is requested again every step: {calls:.0f} cudaFree/hipFree"
        f" and {allocs:.0f} raw allocations per step, and the device idles while the host frees"
        f" ({share:.0%} of the step)"
    )


def judge_allocator_churn(rows: list[SyncRow], ev: RunEvidence) -> list[Finding]:
    return _blocking_finding(rows, ev, T.CHURN_IDLE_SHARE, "memory.allocator_churn", _churn_summary)
