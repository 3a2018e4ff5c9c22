"""The manifestation checks (ratio, healthy-twin noise) the bundle cache holds for a case set: what the
HTML report shows beside each case (reports read nothing from recording, so the CLI hands them over).

A run folder keeps each case's measured impact but not the check's noise; the check is in the truth file
of the case's repeat-0 bundle. It is found by the same key the run's evidence step used: the case's
recording spec, the recording code, the resolved device and the torch version. A case recorded by other
code, on another machine or with another torch has no entry, and the report says its check is not in
this machine's cache rather than showing another recording's numbers.
"""

from __future__ import annotations

from pathlib import Path

from diageval.cases.load import CaseSet
from diageval.recording.cache import cache_key, read_truth, recording_code_version
from diageval.recording.truth import Verification


def stored_checks(case_set: CaseSet, device: str, cache_dir: Path | None = None) -> dict[str, Verification]:
    """Case id -> its stored manifestation check, for every positive case whose check the cache holds."""
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
        if truth is not None and truth.verification is not None:
            out[case.id] = truth.verification
    return out
