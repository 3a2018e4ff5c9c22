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
    from diageval.recording.cache import ensure_bundle

    cache = bundle_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    bundles = {}
    # pytest-xdist workers each build this fixture: one records, the others wait and then find the cache full
    # (two recordings of one key would replace each other's folder under a reader)
    with open(cache / ".corpus-fixture.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for lc in load_case_set().cases:
            case = lc.case
            if case.recorded is not None or case.requires.device == "cuda" or case.evidence_kind == "recorded":
                continue
            if case.fleet is not None:  # a regression or fleet: its members, shared, and the fleet bundle
                from diageval.recording.fleet import ensure_fleet_bundle

                _, folder, _ = ensure_fleet_bundle(case, "cpu", cache_dir=cache)
            else:
                _, folder, _ = ensure_bundle(case, "cpu", repeat=0, cache_dir=cache)
            bundles[case.id] = folder
    return bundles


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
