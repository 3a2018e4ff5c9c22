"""The built-in corpus: valid, and composed as the design asks (controls, confounders, abstain cases,
every fault at two severities or locations). One positive case is recorded and verified end to end."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from diageval.cases.load import load_case_set, validate_case_files
from diageval.cases.taxonomy import load_taxonomy
from diageval.paths import default_cases_dir

LIVE_FAULTS = {"dataloader_starvation", "blocking_checkpoint", "collective_stall", "slow_rank", "kernel_launch_overhead",
               "load_imbalance"}


@pytest.fixture(scope="module")
def corpus():
    return load_case_set()


def test_corpus_validates():
    loaded, problems = validate_case_files([default_cases_dir()], load_taxonomy())
    assert problems == []
    assert len(loaded) >= 14


def test_every_fault_has_two_positive_cases_that_differ(corpus):
    variants = defaultdict(set)
    for lc in corpus.cases:
        if lc.case.labels.expect == "diagnose":
            for f in lc.case.faults:
                variants[f.name].add((lc.case.workload.name, repr(sorted(f.params.items()))))
    for name in LIVE_FAULTS:
        assert len(variants[name]) >= 2, name


def test_straggler_cases_cover_both_ranks_and_labels_match_faults(corpus):
    targets = set()
    for lc in corpus.cases:
        for f in lc.case.faults:
            if f.name == "slow_rank" and lc.case.labels.expect == "diagnose":
                targets.add(f.params["target_rank"])
                assert lc.case.labels.causes[0].ranks == [f.params["target_rank"]]
    assert targets == {0, 1}


def test_controls_confounders_and_abstain_cases_are_there(corpus):
    expects = Counter(lc.case.labels.expect for lc in corpus.cases)
    assert expects["abstain"] >= 1
    controls = [lc.case for lc in corpus.cases
                if lc.case.labels.expect == "healthy" and not lc.case.faults and lc.case.recorded is None]
    assert {c.workload.name for c in controls} >= {"mlp_ddp", "convnet_allreduce", "transformer_lm"}
    confounders = [lc.case for lc in corpus.cases if lc.case.labels.expect == "healthy" and lc.case.faults]
    assert confounders
    assert all(lc.case.labels.symptoms for lc in corpus.cases if lc.case.labels.expect == "diagnose")


@pytest.mark.slow
def test_a_positive_case_manifests_against_its_twin(corpus, tmp_path):
    from diageval.recording.prepare import prepare_evidence

    lc = corpus.get("starved-loader-mlp")
    ev = prepare_evidence(lc, device="cpu", cache_dir=tmp_path)
    v = ev.verification
    assert v is not None and v.repeats == 3
    assert v.manifested, v
    assert v.ratio > 1.5 and 0.2 < v.impact < 1
    again = prepare_evidence(lc, device="cpu", cache_dir=tmp_path)  # everything reused
    assert (again.bundle_id, again.verification) == (ev.bundle_id, v)
    healthy = prepare_evidence(corpus.get("mlp-ddp-healthy"), device="cpu", cache_dir=tmp_path)
    assert healthy.verification is None
