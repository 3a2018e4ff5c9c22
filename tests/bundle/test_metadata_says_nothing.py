"""Metadata says nothing (issue 11): no field of ``bundle.json``, ``steps.jsonl`` or a trace's header singles
out a cause, and a classifier that reads only those fields does no better than always guessing the
commonest label.

"Metadata" here is what a bundle says about the run rather than what happened in it: the environment
and world size, which kinds of file the bundle holds, how many steps and ranks ``steps.jsonl`` logs, the
trace header's keys and values (profiler configuration, process groups), and the trace window (how many
profiled steps, from which step). Not metadata: the events themselves, their shapes and durations, and
file sizes and checksums, which follow from what ran (a job that launches 50 times more ops writes a
bigger trace; that is evidence, not a leak). Random per-recording values (ids, timestamps, temp paths)
are dropped.

The label of a case for this test: its first cause, or ``healthy``/``abstain``. Reads every injected
CPU case's bundle through the ``corpus_bundles`` fixture (slow on a cold cache).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from diageval.bundle.model import EvidenceBundle
from diageval.bundle.trace_stream import StreamState, TraceFormatError, iter_trace_events
from diageval.cases.load import load_case_set

pytestmark = pytest.mark.slow

RANDOM_HEADER_KEYS = {"trace_id", "traceName", "baseTimeNanoseconds"}  # differ per recording, say nothing
STEP_MARKER = re.compile(r"ProfilerStep#(\d+)")


def metadata(root: Path) -> dict[str, Any]:
    """The metadata fields of one bundle, flat: name -> a str (categorical) or a number."""
    bundle = EvidenceBundle.open(root)
    out: dict[str, Any] = {f"env.{k}": str(v) for k, v in bundle.env.model_dump().items() if k != "host"}
    out["world_size"] = bundle.world_size
    out["file_kinds"] = ",".join(sorted({re.sub(r"\d+", "N", f.path.split("/")[0]) for f in bundle.manifest.files}))
    steps = bundle.steps()
    by_rank = Counter(s.rank for s in steps)
    out["steps.ranks"] = len(by_rank)
    out["steps.per_rank"] = max(by_rank.values(), default=0)
    out["steps.first"] = min((s.step for s in steps), default=-1)
    traces = bundle.trace_paths()
    out["traced_ranks"] = len(traces)
    if traces:
        rank, path = min(traces.items())
        state = StreamState()
        profiled: list[int] = []
        try:
            for ev in iter_trace_events(path, state):
                m = STEP_MARKER.fullmatch(ev.name or "")
                if m:
                    profiled.append(int(m.group(1)))
        except TraceFormatError:
            pass  # a deliberately cut trace: its header and the steps before the cut still count
        for key, value in state.header.items():
            if key not in RANDOM_HEADER_KEYS:
                out[f"header.{key}"] = _plain(value)
        out["window.steps"] = len(set(profiled))
        out["window.first"] = min(profiled, default=-1)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    text = json.dumps(value, sort_keys=True)
    return re.sub(r'"rank": \d+', '"rank": N', text)  # a rank's own number is not about the run


@pytest.fixture(scope="module")
def table(corpus_bundles) -> tuple[list[dict[str, Any]], list[str]]:
    cases = {lc.case.id: lc.case for lc in load_case_set().cases}
    rows, labels = [], []
    for case_id, root in sorted(corpus_bundles.items()):
        case = cases[case_id]
        rows.append(metadata(root))
        labels.append(case.labels.causes[0].category if case.labels.causes else case.labels.expect)
    return rows, labels


def separating_fields(rows: list[dict[str, Any]], labels: list[str]) -> list[str]:
    """(field, label) pairs where the field alone tells that label's cases from every other case: the values
    its cases take are disjoint from the others' (a categorical field), or lie wholly above or below them (a
    numeric field, one threshold). Only labels with at least 2 cases: one case is trivially apart."""
    found = []
    fields = sorted({k for r in rows for k in r})
    for label, n in Counter(labels).items():
        if n < 2:
            continue
        for f in fields:
            mine = [r.get(f) for r, lab in zip(rows, labels) if lab == label]
            rest = [r.get(f) for r, lab in zip(rows, labels) if lab != label]
            if all(isinstance(v, (int, float)) for v in mine + rest):
                apart = max(mine) < min(rest) or min(mine) > max(rest)
            else:
                apart = not set(map(str, mine)) & set(map(str, rest))
            if apart:
                found.append(f"{f} -> {label} ({sorted(set(map(str, mine)))} vs {sorted(set(map(str, rest)))[:6]})")
    return found


def test_no_metadata_field_singles_out_a_label(table):
    rows, labels = table
    assert len(rows) >= 20, "too few recorded cases to judge"
    assert separating_fields(rows, labels) == []


def loo_accuracy(rows: list[dict[str, Any]], labels: list[str]) -> tuple[float, float]:
    """(leave-one-out accuracy of a depth-3 decision tree on ``rows``, the most it may reach): the base rate
    of the commonest label plus two binomial standard errors (at n cases the accuracy wanders that much by
    chance). Strings are one-hot encoded, numbers kept."""
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.model_selection import LeaveOneOut, cross_val_score
    from sklearn.tree import DecisionTreeClassifier

    x = DictVectorizer(sparse=False).fit_transform(rows)
    accuracy = float(cross_val_score(DecisionTreeClassifier(max_depth=3, random_state=0), x, labels, cv=LeaveOneOut()).mean())
    n = len(labels)
    base = max(Counter(labels).values()) / n
    return accuracy, base + 2 * math.sqrt(base * (1 - base) / n)


def test_a_classifier_on_metadata_does_no_better_than_the_base_rate(table):
    rows, labels = table
    accuracy, allowed = loo_accuracy(rows, labels)
    assert accuracy <= allowed, (
        f"a depth-3 tree on metadata alone: leave-one-out accuracy {accuracy:.2f} over {len(labels)} cases, above the "
        f"base rate + 2 SE ({allowed:.2f}); labels {dict(Counter(labels))}"
    )


def test_the_checks_catch_a_planted_field(table):
    """Neither check is vacuous: one field that codes the label is found by both."""
    rows, labels = table
    codes = {lab: float(i) for i, lab in enumerate(sorted(set(labels)))}
    planted = [dict(r, leak=codes[lab]) for r, lab in zip(rows, labels)]
    assert len([f for f in separating_fields(planted, labels) if f.startswith("leak ->")]) >= 2  # the lowest and highest code
    accuracy, allowed = loo_accuracy(planted, labels)
    assert accuracy > allowed
