"""The reference diagnosers: null, prior, oracle, leak (which gets public words only)."""

from __future__ import annotations

import pytest
from run_fakes import make_case, make_case_set, write_bundle

from diageval.bundle.model import EvidenceBundle
from diageval.cases.load import load_case_set
from diageval.cases.taxonomy import load_taxonomy
from diageval.diagnosers.reference import LeakDiagnoser, NullDiagnoser, OracleDiagnoser, PriorDiagnoser
from diageval.recording.faults import FAULTS
from diageval.hosting.corpus import PublicVocabulary, ReferenceCorpus


@pytest.fixture
def case_set():
    return make_case_set(
        [
            make_case("straggler-a", cause="compute.straggler_rank", ranks=[1]),
            make_case("straggler-b", cause="compute.straggler_rank", ranks=[0]),
            make_case("starved-a", cause="input.dataloader_starvation", fault="slow_loader"),
            make_case("healthy-a", expect="healthy"),
            make_case("truncated-a", expect="abstain"),
        ]
    )


def _bundle(tmp_path, name="b1", **kw) -> EvidenceBundle:
    return EvidenceBundle.open(write_bundle(tmp_path / name, name, **kw))


def test_null_claims_nothing(tmp_path):
    d = NullDiagnoser().diagnose(_bundle(tmp_path))
    assert d.findings == [] and d.abstain is None


def test_prior_claims_the_most_frequent_cause_with_its_frequency(tmp_path, case_set):
    prior = PriorDiagnoser()
    prior.prepare(ReferenceCorpus.from_case_set(case_set))
    [claim] = prior.diagnose(_bundle(tmp_path)).findings
    assert claim.category == "compute.straggler_rank" and claim.kind == "cause"
    assert claim.confidence == pytest.approx(2 / 3)


def test_reference_diagnosers_refuse_to_guess_without_the_corpus(tmp_path):
    for d in (PriorDiagnoser(), OracleDiagnoser(), LeakDiagnoser()):
        with pytest.raises(RuntimeError, match="prepare"):
            d.diagnose(_bundle(tmp_path))


def test_oracle_claims_the_labels_of_the_mapped_case(tmp_path, case_set):
    oracle = OracleDiagnoser()
    oracle.prepare(ReferenceCorpus.from_case_set(case_set, {"b1": "straggler-a", "b2": "truncated-a", "b3": "healthy-a"}))
    d = oracle.diagnose(_bundle(tmp_path, "b1"))
    assert [(f.category, f.kind, f.ranks) for f in d.findings] == [
        ("compute.straggler_rank", "cause", [1]),
        ("symptom.slow_step", "symptom", None),
    ]
    assert oracle.diagnose(_bundle(tmp_path, "b2")).abstain is not None
    assert oracle.diagnose(_bundle(tmp_path, "b3")).causes == []
    assert "not one of this run's bundles" in oracle.diagnose(_bundle(tmp_path, "b4")).abstain.reason


def _leak() -> LeakDiagnoser:
    leak = LeakDiagnoser()
    leak.prepare(PublicVocabulary.build(load_taxonomy()))
    return leak


def test_leak_finds_nothing_on_clean_bundles(tmp_path):
    d = _leak().diagnose(_bundle(tmp_path, trace_text="aten::mm gloo:all_reduce ProfilerStep#3", log_text="epoch 1 loss 0.3\n"))
    assert d.findings == []


@pytest.mark.parametrize(
    "where, text, expected",
    [
        ("log", "applying slow_rank", {"compute.straggler_rank"}),  # a fault name
        ("trace", "target_rank=1", {"compute.straggler_rank", "comm.collective_hang"}),  # a parameter of slow_rank and collective_hang
        ("trace", "cause=compute.straggler_rank", {"compute.straggler_rank"}),  # a taxonomy id
        ("log", "DATALOADER_STARVATION", {"input.dataloader_starvation"}),  # a cause id's last segment, any case
        ("log", "start_step: 5", {"input.dataloader_starvation", "checkpoint.blocking_save", "comm.collective_stall",
                                  "compute.straggler_rank"}),  # a parameter several faults share
        ("trace", "injected by straggler-rank1", set()),  # a case id: without the labels it points nowhere
    ],
)
def test_leak_claims_what_a_leaking_bundle_names(tmp_path, where, text, expected):
    kw = {"trace_text": text} if where == "trace" else {"log_text": text + "\n"}
    d = _leak().diagnose(_bundle(tmp_path, **kw))
    assert {f.category for f in d.causes} == expected
    assert all(f.evidence for f in d.causes)


def test_leak_gets_public_words_only():
    vocabulary = PublicVocabulary.build(load_taxonomy())
    text = vocabulary.model_dump_json()
    for lc in load_case_set().cases:  # no case id, and nothing the harness did not register publicly
        assert lc.case.id not in text


def test_every_labeled_cause_is_one_its_faults_declare():
    """What leak points a fault's words at (FaultInfo.injects) agrees with the corpus' labels."""
    for lc in (lc for lc in load_case_set().cases if lc.case.recorded is None):  # recorded cases inject nothing
        faults = [*lc.case.faults, *(f for ff in (lc.case.fleet.faults if lc.case.fleet else []) for f in ff.faults)]
        injected = {cause for f in faults for cause in FAULTS[f.name].injects}
        assert {c.category for c in lc.case.labels.causes} <= injected, lc.case.id


def test_leak_matches_whole_words_only(tmp_path):
    d = _leak().diagnose(_bundle(tmp_path, log_text="my_slow_rank_v2 xslow_rank target_ranks\n"))
    assert d.findings == []


def test_leak_sees_terms_across_chunk_seams(tmp_path):
    leak = _leak()
    term = "slow_rank"
    bundle = _bundle(tmp_path, log_text="")
    log = bundle.root / "logs" / "rank0.log"
    for split in range(1, len(term)):
        leak.CHUNK = 64
        pad = "x" * (64 - split - 1) + " "
        log.write_text(pad + term + " end\n")
        assert {f.category for f in leak.diagnose(bundle).causes} == {"compute.straggler_rank"}, split
        log.write_text(pad + term + "_v2 end\n")  # a longer word continuing past the seam
        assert leak.diagnose(bundle).causes == [], split


def test_leak_reads_file_names(tmp_path):
    bundle = _bundle(tmp_path)
    (bundle.root / "logs" / "slow_rank.log").write_text("nothing here\n")
    assert {f.category for f in _leak().diagnose(bundle).causes} == {"compute.straggler_rank"}
