"""``diageval trace stats`` for people: the figures of :mod:`diageval.bundle.trace_stats` as named lines.

``summary_rows`` gives (line name, value) pairs, medians over the profiler steps (the ``time:`` lines: sums over
them, the table the rules name causes from, each part with its standard error); the table and the
side-by-side comparison print them. Recorded cases quote these lines verbatim (``recorded.measured``),
so a reviewer re-derives a label's figures with one command and a test checks they still match.
"""

from __future__ import annotations

from pathlib import Path

from diageval.bundle.attribution import format_rows
from diageval.bundle.trace_stats import BLOCKING_KINDS, GAP_BINS_US, TraceStats, quantile


def _median(values: list[float]) -> float | None:
    return quantile(sorted(values), 0.5) if values else None


def summary_rows(stats: TraceStats) -> list[tuple[str, str]]:
    """(measure, value) lines: medians over steps of the figures an expert reads first."""
    steps = stats.steps
    rows: list[tuple[str, str]] = []

    def med(f) -> float | None:
        return _median([f(s) for s in steps])

    def fmt_us(v: float | None) -> str:
        return "-" if v is None else (f"{v / 1e3:.2f} ms" if v >= 1000 else f"{v:.1f} us")

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.0%}"

    rows.append(("trace", f"{Path(stats.path).name} ({stats.json_bytes / 1e6:.1f} MB JSON, {stats.events} events,"
                          f" {stats.mb_per_s:.0f} MB/s)"))
    rows.append(("rank / world", f"{stats.rank if stats.rank is not None else '-'} / {stats.world_size or '-'}"))
    rows.append(("devices", f"{stats.devices[0] if stats.devices else '-'} (accelerator: {stats.has_accelerator},"
                            f" device events: {stats.has_device_events}, categories: {stats.category_style})"))
    rows.append(("steps", "none: one whole-trace window" if stats.whole_trace else
                 f"{len(steps)} ({', '.join(str(s.number) for s in steps[:8])}{'...' if len(steps) > 8 else ''})"))
    if stats.truncated:
        rows.append(("truncated", stats.truncated))
    rows += [("evidence defect", why) for why in stats.defects]
    if not steps:
        return rows
    rows.append(("step time (median)", fmt_us(med(lambda s: s.dur_us))))
    rows.append(("device busy share", pct(med(lambda s: s.device_busy_share))))
    for b in GAP_BINS_US:
        rows.append((f"device gaps > {b:g} us / step", f"{med(lambda s: s.device_gaps.get(f'{b:g}', 0)):.0f}"))
    rows.append(("device gap time / step", fmt_us(med(lambda s: s.device_gap_us))))
    rows.append(("launches / step", f"{med(lambda s: s.launches):.0f}"))
    delays = [s.launch_delay_median_us for s in steps if s.launch_delay_median_us is not None]
    rows.append(("launch-to-start delay (median of step medians)", fmt_us(_median(delays))))
    p90 = [s.launch_delay_p90_us for s in steps if s.launch_delay_p90_us is not None]
    rows.append(("launch-to-start delay p90", fmt_us(_median(p90))))
    classes = sorted({k for s in steps for k in s.device_us_by_class})
    for cls in classes:
        rows.append((f"device time: {cls}", fmt_us(med(lambda s: s.device_us_by_class.get(cls, 0.0)))
                     + f" ({pct(med(lambda s: s.device_us_by_class.get(cls, 0.0) / s.dur_us if s.dur_us else 0.0))} of step)"))
    for kind in BLOCKING_KINDS:
        calls = med(lambda s: s.blocking[kind].calls if kind in s.blocking else 0)
        if not any(kind in s.blocking for s in steps):
            continue
        host = med(lambda s: s.blocking[kind].host_us if kind in s.blocking else 0.0)
        idle = med(lambda s: s.blocking[kind].device_idle_us if kind in s.blocking else 0.0)
        rows.append((f"blocking: {kind}", f"{calls:.0f} calls/step, host {fmt_us(host)}, device idle meanwhile {fmt_us(idle)}"))
    rows.append(("device idle while host blocks", fmt_us(med(lambda s: s.blocking_device_idle_us))
                 + f" ({pct(med(lambda s: s.blocking_device_idle_us / s.dur_us if s.dur_us else 0.0))} of step)"))
    rows.append(("raw allocations / step", f"{med(lambda s: s.allocations):.0f}"))
    rows.append(("DataLoader wait", fmt_us(med(lambda s: s.dataloader_wait_us))
                 + f" ({pct(med(lambda s: s.dataloader_wait_us / s.dur_us if s.dur_us else 0.0))} of step)"))
    rows.append(("communication: exposed / overlapped", f"{fmt_us(med(lambda s: s.comm_exposed_us))} /"
                 f" {fmt_us(med(lambda s: s.comm_overlapped_us))}"
                 f" (exposed {pct(med(lambda s: s.comm_exposed_us / s.dur_us if s.dur_us else 0.0))} of step)"))
    # busiest first; threads that tie (two at 100% of every step) by their id, so that the table is the same on
    # every run (a set's order of strings changes with the interpreter's hash seed)
    tids = sorted({t.tid for s in steps for t in s.threads},
                  key=lambda tid: (-sum(t.busy_us for s in steps for t in s.threads if t.tid == tid), tid))
    for n, tid in enumerate(tids[:4], 1):
        ops = med(lambda s: next((t.ops for t in s.threads if t.tid == tid), 0))
        busy = med(lambda s: next((t.busy_us / s.dur_us for t in s.threads if t.tid == tid), 0.0) if s.dur_us else 0.0)
        auto = any(t.autograd for s in steps for t in s.threads if t.tid == tid)
        rows.append((f"host thread #{n} by busy time", f"tid {tid}{' (autograd)' if auto else ''}: {ops:.0f} ops/step,"
                     f" in an op {pct(busy)} of the step"))
    # the time table the rules name causes from (diageval.bundle.attribution): sums over the steps, not medians
    span = "the span with device work" if stats.has_device_events else "the recording"
    rows += format_rows(stats.time_table, f"{span} (no step markers)" if stats.whole_trace else
                        f"{len(steps)} step{'s' if len(steps) != 1 else ''}",
                        host_only=not stats.has_device_events)
    return rows


def format_table(stats: TraceStats) -> str:
    rows = summary_rows(stats)
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def format_compare(a: TraceStats, b: TraceStats) -> str:
    ra, rb = dict(summary_rows(a)), dict(summary_rows(b))
    keys = list(ra) + [k for k in rb if k not in ra]
    width = max(len(k) for k in keys)
    wa = max(len(v) for v in ra.values())
    lines = [f"{'':<{width}}  {'A':<{wa}}  B"]
    lines += [f"{k:<{width}}  {ra.get(k, '-'):<{wa}}  {rb.get(k, '-')}" for k in keys]
    return "\n".join(lines)


__all__ = ["summary_rows", "format_table", "format_compare"]
