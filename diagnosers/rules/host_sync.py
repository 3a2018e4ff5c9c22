"""Is the host blocked in synchronising calls while the device has nothing to do?

Per profiler step of a GPU trace (``trace_stats``): the device idle time while the host thread sits in a
blocking runtime call (device/stream/event synchronize, a synchronous copy, an async copy whose host
side is pageable memory, ``cudaFree``/``hipFree``). A ``.item()``, a ``.cpu()`` or a copy from pageable
memory in the loop stops the host from queuing the next kernels, so the device drains its queue and
waits. Time the device idles *while* the host blocks is lost to the synchronisation alone (a sync whose
device keeps computing costs nothing: the host merely waits for work that had to finish anyway).

A cause when that idle time is at least ``SYNC_IDLE_SHARE`` of the step on ``PERSISTENT_SHARE`` of at
least ``MIN_PATTERN_STEPS`` steps. The kind of call holding most of it is named in the summary.
"""

from __future__ import annotations

from pydantic import BaseModel

from diageval.diagnosers.rules import thresholds as T
from diageval.diagnosers.rules.inputs import RunEvidence
from diageval.diagnosers.rules.stats import confidence_from_margin, median
from diageval.diagnosis import Finding

_WHAT = {
    "sync": "device/stream/event synchronize calls",
    "sync_copy": "synchronous copies",
    "pageable_copy": "copies to or from pageable host memory (synchronous despite the async API)",
    "free": "cudaFree/hipFree calls (each synchronises the device)",
}


class SyncRow(BaseModel):
    rank: int
    steps: int
    median_share: float  # device idle while the host blocks / step
    median_idle_us: float
    median_step_us: float
    by_kind: dict[str, tuple[float, float, float]]  # kind -> median (calls, host us, device idle us) per step
    flags: list[bool]


def measure_host_sync(ev: RunEvidence) -> list[SyncRow]:
    rows = []
    for rank, s in sorted(ev.traces.items()):
        steps = [st for st in s.steps if st.gpu is not None and st.dur_us > 0]
        if not steps:
            continue
        kinds = sorted({k for st in steps for k in st.gpu.blocking})
        by_kind = {
            k: (
                median([st.gpu.blocking[k].calls if k in st.gpu.blocking else 0 for st in steps]),
                median([st.gpu.blocking[k].host_us if k in st.gpu.blocking else 0.0 for st in steps]),
                median([st.gpu.blocking[k].device_idle_us if k in st.gpu.blocking else 0.0 for st in steps]),
            )
            for k in kinds
        }
        shares = [st.gpu.blocking_device_idle_us / st.dur_us for st in steps]
        rows.append(
            SyncRow(
                rank=rank,
                steps=len(steps),
                median_share=median(shares),
                median_idle_us=median([st.gpu.blocking_device_idle_us for st in steps]),
                median_step_us=median([st.dur_us for st in steps]),
                by_kind=by_kind,
                flags=[x >= T.SYNC_IDLE_SHARE for x in shares],
            )
        )
    return rows


def judge_host_sync(rows: list[SyncRow], ev: RunEvidence) -> list[Finding]:
    hit = [r for r in rows if r.steps >= T.MIN_PATTERN_STEPS and sum(r.flags) >= T.PERSISTENT_SHARE * r.steps]
    if not hit:
        return []
    share = median([r.median_share for r in hit])
    consistency = median([sum(r.flags) / r.steps for r in hit])
    top_kind = max(
        {k for r in hit for k in r.by_kind}, key=lambda k: sum(r.by_kind.get(k, (0, 0, 0))[2] for r in hit)
    )
    start = min(ev.training_step(r.rank, ev.traces[r.rank].steps[0].number) for r in hit)
    stop = max(ev.training_step(r.rank, ev.traces[r.rank].steps[-1].number) + 1 for r in hit)
    evidence = []
    for r in hit:
        parts = [
            f"{k}: {c:.0f} calls, host {h / 1e3:.2f} ms, device idle {i / 1e3:.2f} ms"
            for k, (c, h, i) in sorted(r.by_kind.items(), key=lambda kv: -kv[1][2])
        ]
        evidence.append(
            f"{ev.trace_file(r.rank)}: per step (median) the device idles {r.median_idle_us / 1e3:.2f} ms"
            f" ({r.median_share:.0%} of {r.median_step_us / 1e3:.1f} ms) while the host blocks, on {sum(r.flags)}"
            f" of {r.steps} steps; " + "; ".join(parts)
        )
    return [
        Finding(
            category="host.device_sync",
            confidence=confidence_from_margin(share, T.SYNC_IDLE_SHARE, consistency),
            ranks=[r.rank for r in hit],
            steps=(start, stop),
            impact=round(min(1.0, share), 3),
            summary=(
                f"the host blocks in {_WHAT.get(top_kind, top_kind)} every step while the device idles"
                f" ({share:.0%} of the step)"
            ),
            evidence=evidence,
        )
    ]
