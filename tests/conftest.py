"""Fixtures shared by test modules."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def corpus_bundles() -> dict[str, Path]:
    """case id -> bundle folder, for every injected case of the built-in corpus that records on CPU.

    Recorded once per machine through the bundle cache (``$DIAGEVAL_HOME``, as ``diageval run`` records
    them: the very bundles a diagnoser is shown), so the tests that read the whole corpus (leaks,
    metadata) share one recording, and CI, whose board runs first, records nothing twice. Recorded cases
    (others' traces) and cases that need CUDA are left out.
    """
    from diageval.cases.load import load_case_set
    from diageval.paths import bundle_cache_dir
    from diageval.recording import record_cases

    cache = bundle_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    ids = [lc.case.id for lc in load_case_set().cases
           if lc.case.recorded is None and lc.case.requires.device != "cuda" and lc.case.evidence_kind != "recorded"]
    # pytest-xdist workers each build this fixture: one records, the others wait and then find the cache full
    # (two recordings of one key would replace each other's folder under a reader). record_cases records what
    # `diageval run` shows (a job case's drawn variant, recording/draw.py), so after CI's board runs nothing is
    # recorded here; the undrawn cases it once recorded were 122 new recordings, ~175 s of CI's test phase
    with open(cache / ".corpus-fixture.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return {case_id: folder for case_id, folder, _ in record_cases(ids, device="cpu", cache_dir=cache)}


@pytest.fixture(scope="session")
def shown_rank(corpus_bundles):
    """``shown_rank(case_id, r)``: the rank a corpus bundle holds what the case file names rank ``r`` (a job case is
    recorded as a drawn variant of itself, its ranks permuted: recording/draw.py); ``r`` for a case not drawn."""
    from diageval.cases.load import load_case_set
    from diageval.paths import bundle_cache_dir
    from diageval.recording.draw import recording_draw

    cases = {lc.case.id: lc.case for lc in load_case_set().cases}
    cache = bundle_cache_dir()

    def shown(case_id: str, r: int) -> int:
        draw = recording_draw(cases[case_id], cache)
        return r if draw is None else draw.rank(r)

    return shown


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules that hold a ``slow`` test run first, each module's tests kept together (its module fixtures,
    a local Ray say, are built once per worker that runs them).

    pytest-xdist's work-stealing hands each worker a contiguous share and lets an idle worker take the tail of
    another's: started on the long tests, the workers end on short ones and finish together, instead of one
    worker running a minute-long test alone at the end (a 2-worker CI run left 7% of its worker time idle).
    """
    slow_modules = {item.module.__name__ for item in items if item.get_closest_marker("slow") is not None
                    and getattr(item, "module", None) is not None}
    items.sort(key=lambda item: getattr(getattr(item, "module", None), "__name__", "") not in slow_modules)
