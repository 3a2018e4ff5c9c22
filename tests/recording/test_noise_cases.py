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
def test_the_edits_show_in_the_recorded_noise_bundles(noise_bundles):
    offset = noise_bundles["mlp-healthy-clock-offset"]
    starts = {r: min(s.t_start for s in offset.steps() if s.rank == r and s.step == 10) for r in (0, 1)}
    assert starts[1] - starts[0] > 0.5  # rank 1's clock runs 900 ms ahead
    assert sorted(noise_bundles["convnet-healthy-one-rank-traced"].trace_paths()) == [1]
    window = noise_bundles["mlp-healthy-short-window"].load_trace(0)["traceEvents"]
    assert sorted(e["name"] for e in window if e.get("name", "").startswith("ProfilerStep#")) == \
        ["ProfilerStep#22", "ProfilerStep#23"]
    markers = noise_bundles["many-tiny-ops-no-step-markers"].load_trace(1)["traceEvents"]
    assert not any(e.get("name", "").startswith("ProfilerStep#") for e in markers)


def _rules_with_offset(tmp_path, shape, offset_ms: float | None, rank: int = 1):
    from synthetic_traces import StepShape, build_bundle  # noqa: F401

    from diageval.diagnosers.rules.diagnoser import RulesDiagnoser

    root = build_bundle(tmp_path / f"b{offset_ms}", shape, n_steps=20)
    if offset_ms is not None:
        info = FAULTS["clock_offset"]
        info.load()(info.params_model.model_validate({"offset_rank": rank, "offset_ms": offset_ms})).apply(root)
    return RulesDiagnoser().diagnose(EvidenceBundle.open(root))


@pytest.mark.parametrize("offset_ms", [350.0, -1200.0, 5.0])
def test_rules_reads_a_skewed_clock_as_the_unskewed_one(tmp_path, offset_ms):
    """A rank on a host whose clock is off: rules aligns ranks by their collectives' ends, so a healthy run
    stays quiet, a straggler is named on the same rank and a stall stays a stall (before that alignment a
    350 ms skew read as rank 1 arriving 350 ms late every step)."""
    from synthetic_traces import StepShape

    def claims(shape, rank=1):
        return sorted((f.category, tuple(f.ranks or ())) for f in _rules_with_offset(tmp_path, shape, offset_ms, rank).causes)

    def plain(shape):
        return sorted((f.category, tuple(f.ranks or ())) for f in _rules_with_offset(tmp_path, shape, None).causes)

    healthy = lambda r, k: StepShape()  # noqa: E731
    straggler = lambda r, k: StepShape(compute_us=14000 if r == 0 and k >= 5 else 4000)  # noqa: E731
    stall = lambda r, k: StepShape(comm_us=9000 if k >= 5 else 800)  # noqa: E731
    assert claims(healthy) == plain(healthy) == []
    assert claims(straggler) == plain(straggler) == [("compute.straggler_rank", (0,))]
    assert claims(straggler, rank=0) == plain(straggler)
    assert claims(stall) == plain(stall) and plain(stall) == [("comm.collective_stall", (0, 1))]
