"""Recording's face (issue 42, item 1): ``prepare_case`` turns a loaded case under a ``RecordingPolicy`` into
``Evidence`` (its bundle and the ``EvidenceFacts`` scoring copies) or a ``CaseEnd`` with the result line's status
and words; the run no longer reads the prepared evidence with getattr."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_fakes import FakeEvidence, fake_verification, make_case, make_case_set

from diageval.recording import CaseEnd, Evidence, RecordingPolicy, prepare_case
from diageval.recording.draw import RecordingDraw
from diageval.recording.recorded import EvidenceUnavailable
from diageval.recording.truth import ControlCheck
from diageval.scoring.results import EvidenceFacts


def _loaded(case_id: str, expect: str = "diagnose"):
    return make_case_set([make_case(case_id, expect=expect)]).cases[0]


def _raising(exc: BaseException):
    def prepare(loaded, policy):
        raise exc

    return prepare


def test_a_ready_case_is_its_bundle_and_the_facts_scoring_copies(tmp_path):
    fake = FakeEvidence(tmp_path / "bundles")
    draw = RecordingDraw(seed=1, ranks=[1, 0], steps=20, declared_steps=20)
    seen: list[RecordingPolicy] = []

    def prepare(loaded, policy):
        seen.append(policy)
        return fake(loaded, policy).model_copy(update={"draw": draw})

    policy = RecordingPolicy(device="cpu", cache_dir=tmp_path / "cache")
    evidence = prepare_case(_loaded("p1"), policy, prepare=prepare)
    assert seen == [policy]  # the policy travels whole
    assert isinstance(evidence, Evidence) and evidence.bundle_dir == fake.root / FakeEvidence.bundle_id("p1")
    v = fake_verification(True)
    facts = evidence.facts
    assert (facts.bundle_id, facts.measured_impact, facts.difficulty, facts.rank_draw) == (
        FakeEvidence.bundle_id("p1"), 0.4, v.difficulty, [1, 0])
    assert facts.manifestation is not None and facts.manifestation.effect_to_noise == v.effect_to_noise
    assert facts.measured_magnitude is None and facts.shown_values == {}  # one job: no regression ratio, no words
    healthy = prepare_case(_loaded("h1", expect="healthy"), policy, prepare=fake)
    assert isinstance(healthy, Evidence)
    assert healthy.facts == EvidenceFacts(bundle_id=FakeEvidence.bundle_id("h1"),
                                          bundle_sha256=healthy.facts.bundle_sha256)


@pytest.mark.parametrize(("raised", "status", "error"), [
    (RuntimeError("the ranks did not start"), "harness_error", "recording failed: RuntimeError: the ranks did not start"),
    (EvidenceUnavailable("rank0.json.gz is not in the data folder"), "unavailable", "rank0.json.gz is not in the data folder"),
])
def test_a_preparation_that_raises_is_a_case_end_without_facts(raised, status, error):
    end = prepare_case(_loaded("r1"), RecordingPolicy(), prepare=_raising(raised))
    assert end == CaseEnd(status=status, error=error)


def test_keyboard_interrupt_passes():
    with pytest.raises(KeyboardInterrupt):
        prepare_case(_loaded("k1"), RecordingPolicy(), prepare=_raising(KeyboardInterrupt()))


def test_the_evidence_checks_end_the_case_with_the_ids_they_had(tmp_path):
    fake = FakeEvidence(tmp_path / "bundles")

    def with_(update):
        return lambda loaded, policy: fake(loaded, policy).model_copy(update=update(loaded))

    not_shown = with_(lambda lc: {"verification": fake_verification(False)})
    end = prepare_case(_loaded("n1"), RecordingPolicy(), prepare=not_shown)
    assert end.status == "invalid" and end.error.startswith("the injection did not manifest: ratio 1.8 against min_ratio 1.5")
    assert end.facts.measured_impact == 0.4 and end.facts.manifestation.manifested is False
    assert end.facts.bundle_id == FakeEvidence.bundle_id("n1") and end.facts.difficulty is None

    unchecked = prepare_case(_loaded("u1"), RecordingPolicy(), prepare=with_(lambda lc: {"verification": None}))
    assert (unchecked.status, unchecked.error) == ("invalid", "no manifestation check was recorded for this positive case")
    assert unchecked.facts.measured_impact is None and unchecked.facts.bundle_id == FakeEvidence.bundle_id("u1")

    problems = ["the shown evidence holds compute.straggler_rank on rank 0"]
    control = with_(lambda lc: {"control": ControlCheck(twins=3, checked=[], problems=problems)})
    end = prepare_case(_loaded("c1", expect="healthy"), RecordingPolicy(), prepare=control)
    assert (end.status, end.error) == ("invalid", "the healthy label does not hold: " + problems[0])

    revealing = with_(lambda lc: {"bundle_dir": Path(tmp_path / f"bundle-of-{lc.case.id}")})
    fake(_loaded("v1")).bundle_dir.rename(tmp_path / "bundle-of-v1")
    end = prepare_case(_loaded("v1"), RecordingPolicy(), prepare=revealing)
    assert end.status == "harness_error" and end.error.endswith("reveals the case id")
    assert end.facts == EvidenceFacts(bundle_id=FakeEvidence.bundle_id("v1"), bundle_sha256=end.facts.bundle_sha256)

    missing = with_(lambda lc: {"bundle_dir": tmp_path / "nowhere"})
    end = prepare_case(_loaded("m1"), RecordingPolicy(), prepare=missing)
    assert end.status == "harness_error" and end.error.startswith("unreadable bundle: ")
