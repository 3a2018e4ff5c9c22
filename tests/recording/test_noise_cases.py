"""The evidence-noise and abstain cases of corpus v2 (cases/noise/, cases/abstain/): each applies one evidence
edit to a live recording, is labeled by what the edited evidence still shows (the title says why), and
`rules` reads every one of them without failing. Correctness of rules' claims is measured by the board, not
asserted here (its thresholds are not tuned on these cases)."""

from __future__ import annotations

import pytest

from diageval.bundle.model import EvidenceBundle
from diageval.cases.load import load_case_set
from diageval.recording.faults import FAULTS

CASES = load_case_set()
EDITS = {name for name, info in FAULTS.items() if info.load().stage == "bundle"}
NEW_EDITS = {"clock_offset", "sample_rank_traces", "trace_window", "drop_step_markers", "drop_device_events"}


def _in(folder: str):
    return [lc for lc in CASES.cases if lc.path.parent.name == folder]


def test_every_noise_case_adds_exactly_one_new_evidence_edit_to_live_faults():
    noise = _in("noise")
    assert len(noise) >= 12
    for lc in noise:
        edits = [f.name for f in lc.case.faults if f.name in EDITS]
        assert len(edits) == 1 and edits[0] in NEW_EDITS, lc.case.id
        assert lc.case.faults[-1].name == edits[0], lc.case.id  # the edit comes last, after the live faults
    used = {f.name for lc in noise for f in lc.case.faults} & NEW_EDITS
    assert {"clock_offset", "sample_rank_traces", "trace_window", "drop_step_markers"} <= used


def test_a_third_of_the_new_cases_are_healthy_confounders_or_abstain():
    new = _in("noise") + _in("cuda") + [lc for lc in _in("abstain") if {f.name for f in lc.case.faults} & NEW_EDITS]
    quiet = [lc for lc in new if lc.case.labels.expect != "diagnose"]
    assert 3 * len(quiet) >= len(new), (len(quiet), len(new))
    assert {lc.case.labels.expect for lc in _in("noise")} == {"diagnose", "healthy", "abstain"}


def test_titles_say_why_the_label_holds_and_no_difficulty_is_declared():
    for lc in _in("noise") + _in("cuda"):
        assert len(lc.case.title) > 60, lc.case.id
        assert "difficulty" not in lc.path.read_text(), lc.case.id  # measured elsewhere, never declared here


@pytest.fixture(scope="module")
def noise_bundles(corpus_bundles):
    """The noise cases' bundles, from conftest's corpus recording (derived from their bases' recordings)."""
    return {lc.case.id: EvidenceBundle.open(corpus_bundles[lc.case.id]) for lc in _in("noise")
            if lc.case.requires.device != "cuda"}


@pytest.mark.slow
def test_rules_reads_every_noise_case_without_failing(noise_bundles):
    from diageval.diagnosers.rules.diagnoser import RulesDiagnoser

    for case_id, bundle in noise_bundles.items():
        d = RulesDiagnoser().diagnose(bundle)
        assert d.abstain is not None or d.findings is not None, case_id
        assert bundle.verify_checksums() == [], case_id


@pytest.mark.slow
def test_the_edits_show_in_the_recorded_noise_bundles(noise_bundles, shown_rank):
    offset = noise_bundles["mlp-healthy-clock-offset"]
    ahead, other = shown_rank("mlp-healthy-clock-offset", 1), shown_rank("mlp-healthy-clock-offset", 0)
    starts = {r: min(s.t_start for s in offset.steps() if s.rank == r and s.step == 10) for r in (0, 1)}
    assert starts[ahead] - starts[other] > 0.5  # the case file's rank 1 clock runs 900 ms ahead
    assert sorted(noise_bundles["convnet-healthy-one-rank-traced"].trace_paths()) == \
        [shown_rank("convnet-healthy-one-rank-traced", 1)]
    window = noise_bundles["mlp-healthy-short-window"].load_trace(shown_rank("mlp-healthy-short-window", 0))["traceEvents"]
    assert sorted(e["name"] for e in window if e.get("name", "").startswith("ProfilerStep#")) == \
        ["ProfilerStep#22", "ProfilerStep#23"]
    unmarked = shown_rank("many-tiny-ops-no-step-markers", 1)
    markers = noise_bundles["many-tiny-ops-no-step-markers"].load_trace(unmarked)["traceEvents"]
    assert not any(e.get("name", "").startswith("ProfilerStep#") for e in markers)
