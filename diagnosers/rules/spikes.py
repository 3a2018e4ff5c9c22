"""Recurring slow steps whose extra time is spent outside ops, data and collectives: a blocking save.

Step times come from ``steps.jsonl`` (the whole run, not only the profiled window); when it is absent,
from the traces' profiler steps. A spike is a step far above the run's own median (ratio *and* robust
sigmas, so a noisy healthy run does not qualify). The first logged step is never a spike candidate:
warm-up (allocations, lazy imports, the profiler starting) makes it slow in healthy runs too.

Spikes that fall inside the profiled window are attributed: the extra time must sit in the training
thread's unexplained time (no recorded op, no data wait, no collective) on some rank. That rank is
where the save runs; peers that merely wait for it in the next collective are not blamed. At least one
stall must be seen that way when the traces have steps; stalls outside the window then extend the
pattern (and lower the confidence), they cannot establish it.
"""

from __future__ import annotations

from pydantic import BaseModel

from diageval.diagnosers.rules import thresholds as T
from diageval.diagnosers.rules.inputs import RunEvidence
from diageval.diagnosers.rules.stats import claimable, graded_confidence, median, robust_sigma
from diageval.diagnosis import Finding


class SpikeTable(BaseModel):
    source: str  # "steps.jsonl" or "trace"
    steps: int
    median_us: float
    sigma_us: float
    spikes: list[int]  # training step numbers
    excess_us: dict[int, float]  # spike step -> extra time over the median (max over ranks)
    total_us: float
    attributed: dict[int, dict[int, float]]  # spike step -> rank -> share of its excess that is unexplained time
    data_share: dict[int, float]  # spike step -> largest share of excess that is data wait


def _durations(ev: RunEvidence) -> tuple[str, dict[int, dict[int, float]]]:
    """step -> rank -> duration (us)."""
    out: dict[int, dict[int, float]] = {}
    if ev.step_log:
        for rank, rows in ev.step_log.items():
            for r in rows:
                out.setdefault(r.step, {})[rank] = (r.t_end - r.t_start) * 1e6
        return "steps.jsonl", out
    for rank, s in ev.traces.items():
        for st in s.steps:
            out.setdefault(ev.training_step(rank, st.number), {})[rank] = st.dur_us
    return "trace", out


def _quiet_level(durations: list[float]) -> tuple[float, float]:
    """Median and robust sigma of the quiet steps.

    One clipping pass: steps over SPIKE_CLIP x the median are set aside before the statistics are taken,
    so that frequent stalls (a save every 3-4 steps) do not drag the median and inflate the sigma until
    the stalls no longer stand out from them.
    """
    med = median(durations)
    quiet = [d for d in durations if d < T.SPIKE_CLIP * med] or durations
    return median(quiet), robust_sigma(quiet)


def measure_spikes(ev: RunEvidence) -> SpikeTable | None:
    """Spikes per rank against that rank's own median (a save on one rank must not be hidden by the
    peers that wait for it a step later), merged over ranks."""
    source, durs = _durations(ev)
    if len(durs) < 5:
        return None
    numbers = sorted(durs)
    ranks = sorted({r for per in durs.values() for r in per})
    excess: dict[int, float] = {}
    medians, sigmas = [], []
    for rank in ranks:
        own = {n: durs[n][rank] for n in numbers[1:] if rank in durs[n]}
        if len(own) < 4:
            continue
        med, sigma = _quiet_level(list(own.values()))
        medians.append(med)
        sigmas.append(sigma)
        for n, d in own.items():
            if d >= T.SPIKE_RATIO * med and d - med >= T.SPIKE_SIGMAS * sigma:
                excess[n] = max(excess.get(n, 0.0), d - med)
    if not medians:
        return None
    spikes = sorted(excess)
    per_step = {n: max(durs[n].values()) for n in numbers}
    med = median(medians)
    # per-rank trace steps by training step number, for attribution
    trace_steps = {
        rank: {ev.training_step(rank, st.number): st for st in s.steps} for rank, s in ev.traces.items()
    }
    quiet_unexpl = {
        rank: median([st.unexplained_us for st in steps.values()]) for rank, steps in trace_steps.items() if steps
    }
    quiet_data = {rank: median([st.data_wait_us for st in steps.values()]) for rank, steps in trace_steps.items() if steps}
    attributed: dict[int, dict[int, float]] = {}
    data_share: dict[int, float] = {}
    for n in spikes:
        here = {rank: steps[n] for rank, steps in trace_steps.items() if n in steps}
        if not here:
            continue
        attributed[n] = {r: max(0.0, st.unexplained_us - quiet_unexpl[r]) / excess[n] for r, st in here.items()}
        data_share[n] = max(max(0.0, st.data_wait_us - quiet_data[r]) / excess[n] for r, st in here.items())
    return SpikeTable(
        source=source,
        steps=len(numbers),
        median_us=med,
        sigma_us=median(sigmas),
        spikes=spikes,
        excess_us=excess,
        total_us=sum(per_step.values()),
        attributed=attributed,
        data_share=data_share,
    )


def judge_blocking_save(table: SpikeTable | None, ev: RunEvidence) -> list[Finding]:
    if table is None or len(table.spikes) < T.MIN_SPIKES:
        return []
    # spikes the trace shows to be something else (data wait, or time inside ops/collectives) are dropped
    kept = []
    for n in table.spikes:
        if n in table.attributed:
            best = max(table.attributed[n].values())
            if best < T.SPIKE_UNEXPLAINED_SHARE or table.data_share.get(n, 0.0) >= best:
                continue
        kept.append(n)
    # a stall on one rank shows on its peers one step later (they wait in the next collective): adjacent
    # spike steps are one event, costing the largest of their excesses
    events: list[list[int]] = []
    for n in kept:
        if events and n - events[-1][-1] == 1:
            events[-1].append(n)
        else:
            events.append([n])
    cost = {e[0]: max(table.excess_us[n] for n in e) for e in events}
    # the same save of the same state to the same storage costs about the same each time: events far
    # smaller than the typical one (warm-up, a hiccup) are not part of the pattern
    typical = median(list(cost.values())) if cost else 0.0
    events = [e for e in events if cost[e[0]] >= typical / T.SPIKE_SIMILARITY]
    cost = {e[0]: cost[e[0]] for e in events}
    kept = [n for e in events for n in e]
    if len(events) < T.MIN_SPIKES:
        return []
    impact = sum(cost.values()) / table.total_us
    if not claimable(graded_confidence(impact, T.SPIKE_IMPACT)):
        return []
    seen = [n for n in kept if n in table.attributed]
    if not seen and any(s.steps for s in ev.traces.values()):
        return []  # none of the stalls falls where the trace can show what the time was spent on
    ranks: set[int] = set()
    for n in seen:
        shares = table.attributed[n]
        top = max(shares.values())
        ranks.update(r for r, s in shares.items() if s >= T.SPIKE_UNEXPLAINED_SHARE and s >= T.SPIKE_CO_CULPRIT_OF_WORST * top)
    starts = [e[0] for e in events]
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    periodic = bool(gaps) and max(gaps) - min(gaps) <= max(1, 0.25 * median(gaps))
    consistency = (0.5 + 0.5 * len(seen) / len(kept)) * (1.0 if periodic else 0.7)
    # how much of the pattern the trace shows and how regular it is weigh how far the measurement moves the
    # confidence from a coin flip (a pattern seen whole and periodic: all the way; half of it: half the way)
    confidence = round(0.5 + (graded_confidence(impact, T.SPIKE_IMPACT) - 0.5) * consistency, 3)
    if not claimable(confidence):
        return []
    mean_excess = sum(cost.values()) / len(events)
    evidence = [
        f"{table.source}: steps {kept} take {mean_excess / 1e3:.1f} ms longer than the median"
        f" {table.median_us / 1e3:.1f} ms (robust sigma {table.sigma_us / 1e3:.2f} ms)"
        + (f", every {gaps[0]} steps" if periodic else ""),
    ]
    for n in seen[:3]:
        r = max(table.attributed[n], key=table.attributed[n].get)
        evidence.append(
            f"{ev.trace_file(r)}: step {n}: {table.attributed[n][r]:.0%} of the extra time has no op, data wait"
            " or collective on the training thread"
        )
    return [
        Finding(
            category="checkpoint.blocking_save",
            confidence=confidence,
            ranks=sorted(ranks) or None,
            steps=(kept[0], kept[-1] + 1),
            impact=round(min(1.0, impact), 3),
            summary=(
                f"{len(events)} {'periodic ' if periodic else ''}stalls of ~{mean_excess / 1e3:.0f} ms outside ops,"
                f" data and collectives ({impact:.0%} of run time), as a synchronous save would cause"
            ),
            evidence=evidence,
        )
    ]
