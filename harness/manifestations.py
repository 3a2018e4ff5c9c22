"""The manifestation check (ratio, healthy-twin noise) of a run's positive cases, read from this machine's
bundle cache for the HTML report (reports read nothing from recording, so the command gathers it).

A run folder keeps each case's measured impact but not the check's noise; the check is in the truth file
of the case's repeat-0 bundle. It is found by the same key the run used: the case's recording spec, the
recording code, the device the run resolved and the torch version. A case recorded by other code, on
another machine or with another torch has no entry here and the report says the check is not in this
machine's cache, rather than showing another recording's numbers.
"""

from __future__ import annotations

from pathlib import Path

from diageval.case import CaseSet
from diageval.reports.html_data import Manifestation


def cached_manifestations(case_set: CaseSet, device: str, cache_dir: Path | None = None) -> dict[str, Manifestation]:
    """Case id -> its stored manifestation check, for every positive case whose check the cache holds."""
    from diageval.evidence import cache_key, read_truth, recording_code_version
    from diageval.paths import bundle_cache_dir
    from diageval.recording.record import resolve_device

    cache = Path(cache_dir) if cache_dir else bundle_cache_dir()
    if not cache.is_dir():
        return {}
    code = recording_code_version()
    out = {}
    for lc in case_set.cases:
        case = lc.case
        if case.labels.expect != "diagnose":
            continue
        try:
            key = cache_key(case, resolve_device(device, case), code_version=code)
        except Exception:  # noqa: BLE001 - a device this machine cannot resolve: no entry, said on the page
            continue
        truth = read_truth(cache, key)
        v = truth.verification if truth is not None else None
        if v is not None:
            out[case.id] = Manifestation(metric=v.metric, ratio=v.ratio, min_ratio=v.min_ratio, noise=v.noise,
                                         repeats=v.repeats)
    return out
