"""The reference diagnosers on real traces recorded by others (../shared/real-traces): no crash, and an
honest answer: leak finds none of our label words in bundles nobody here shaped; oracle, which knows
no case for them, abstains."""

from __future__ import annotations

import pytest

from diageval.bundle.importer import import_traces
from diageval.bundle.model import EvidenceBundle
from diageval.cases.load import load_case_set
from diageval.diagnosers.reference import LeakDiagnoser, NullDiagnoser, OracleDiagnoser, PriorDiagnoser
from diageval.paths import real_traces_dir
from diageval.hosting.corpus import PublicVocabulary, ReferenceCorpus

REAL_TRACES = real_traces_dir() / "hta"
if not REAL_TRACES.is_dir():
    pytest.skip(f"real traces not found at {REAL_TRACES} (expected ../shared beside the repo)", allow_module_level=True)

TRACE_DIRS = sorted(p for p in REAL_TRACES.iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def corpus() -> ReferenceCorpus:
    return ReferenceCorpus.from_case_set(load_case_set())


@pytest.mark.parametrize("trace_dir", TRACE_DIRS, ids=lambda p: p.name)
def test_reference_diagnosers_cope_with_real_traces(trace_dir, tmp_path, corpus):
    bundle = EvidenceBundle.open(import_traces([trace_dir], tmp_path / "bundle"))
    assert NullDiagnoser().diagnose(bundle).findings == []
    diagnosers = {"prior": PriorDiagnoser(), "oracle": OracleDiagnoser(), "leak": LeakDiagnoser()}
    for name in ("prior", "oracle"):  # the harness hands the labels to these two only
        diagnosers[name].prepare(corpus)
    diagnosers["leak"].prepare(PublicVocabulary.build(corpus.taxonomy))  # public words, no labels
    assert diagnosers["oracle"].diagnose(bundle).abstain is not None
    leak = diagnosers["leak"].diagnose(bundle)
    assert leak.findings == [], [(f.category, f.evidence) for f in leak.findings]
    prior = diagnosers["prior"].diagnose(bundle)
    assert len(prior.causes) == (1 if any(c.labels.causes for c in corpus.cases) else 0)
