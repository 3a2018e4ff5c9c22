"""The reference diagnosers on fleet evidence (issue 24 item 5): the oracle names each labeled cause behind its
factor value and abstains naming aliased values; prior adds its cause behind every blamable value of the fleet at
its factor name's base rate, from the public split only; scored, oracle is perfect and null below a diagnoser that
finds the factor."""

from __future__ import annotations

import pytest
from fleet_fakes import fleet_bundle, fleet_metadata
from tests.scoring.test_scoring_factors import NODE2, NODE4, RACK2, _corpus, fleet_case

from diageval.cases.taxonomy import load_taxonomy
from diageval.diagnosers.reference import NullDiagnoser, OracleDiagnoser, PriorDiagnoser
from diageval.hosting.corpus import ReferenceCorpus
from diageval.scoring.results import EvidenceFacts
from diageval.scoring.summary import DiagnoserInfo, summarize
from diageval.scoring.verdicts import score_case

TAX = load_taxonomy()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    runs = [{"metadata": fleet_metadata(i), "median_s": 0.1, "noise": 0.02} for i in range(8)]
    return fleet_bundle(tmp_path_factory.mktemp("fleet"), runs)


def test_oracle_names_the_factor_and_the_aliased_values(bundle):
    cases = [fleet_case("fa", behind=NODE2), fleet_case("fc", expect="abstain", aliased=[NODE4, RACK2])]
    oracle = OracleDiagnoser()
    oracle.prepare(ReferenceCorpus(cases=cases, taxonomy=TAX, bundle_cases={bundle.bundle_id: "fa"}))
    [claim] = oracle.diagnose(bundle).causes
    assert claim.factor == NODE2 and claim.confidence == 1.0
    oracle.prepare(ReferenceCorpus(cases=cases, taxonomy=TAX, bundle_cases={bundle.bundle_id: "fc"}))
    assert oracle.diagnose(bundle).abstain.factors == [NODE4, RACK2]


def test_prior_states_the_factor_base_rate_over_the_fleet_values_from_the_public_split(bundle):
    public = [fleet_case("fa", behind=NODE2).model_copy(update={"split": "public"}),
              fleet_case("fd", expect="healthy").model_copy(update={"split": "public"})]
    private = [fleet_case(f"p{i}", behind=NODE4, category="compute.numeric_precision").model_copy(
        update={"split": "holdout"}) for i in range(3)]
    prior = PriorDiagnoser()
    prior.prepare(ReferenceCorpus(cases=public + private, taxonomy=TAX))
    d = prior.diagnose(bundle)
    top, *behind = d.findings
    # the public fleets label host.cpu_contention once: 1 of 1 labeled causes; its factor, per name as scoring's
    # climatology counts it: host 1 labeled value of the 8 blamable hosts of the two public fleets (4 each); no
    # version, rack or loader value is labeled, so prior states none of them (their climatology is 0)
    assert (top.category, top.confidence, top.factor) == ("host.cpu_contention", 1.0, None)
    assert sorted(f.factor.value for f in behind) == ["node-01", "node-02", "node-03", "node-04"], behind
    assert {f.factor.name for f in behind} == {"host"}
    assert all(f.confidence == pytest.approx(1 / 8) for f in behind)
    assert {f.category for f in behind} == {"host.cpu_contention"}


def test_oracle_scores_one_and_null_is_below_a_diagnoser_that_finds_the_factor():
    cases = _corpus()

    def run(diagnose):
        results = [score_case(c, diagnose(c), taxonomy=TAX) for c in cases]
        return summarize(results, diagnoser=DiagnoserInfo(spec="x", name="x"), case_set_hash="x",
                         taxonomy_version=TAX.version, n_boot=0).metrics

    from tests.scoring.test_scoring_factors import _honest

    oracle = run(lambda c: _honest(c))
    null = run(lambda c: NullDiagnoser().diagnose(None))
    finder = run(lambda c: _honest(c, 0.7) if c.fleet is not None else NullDiagnoser().diagnose(None))
    assert oracle.skill.value == 1.0 and oracle.skill_ranked.value == 1.0
    assert null.skill_ranked.value < finder.skill_ranked.value and null.skill.value < finder.skill.value
    assert null.factor_recall.value == 0.0 and finder.factor_recall.value == 1.0


def test_oracle_is_perfect_on_every_built_in_regression_and_fleet_in_drawn_words():
    """Issue 39 item 2: every built-in regression and fleet, its value words drawn as an assembly draws them and the
    map handed to the oracle as a run hands it: every event the oracle's diagnosis makes is stated at its outcome."""
    import random
    from types import SimpleNamespace

    from diageval.cases.load import load_case_set
    from diageval.recording.fleet import draw_values

    case_set = load_case_set()
    multi = [lc.case for lc in case_set.cases if lc.case.fleet is not None]
    assert len([c for c in multi if c.kind == "regression"]) >= 15
    rng = random.Random(0)
    shown = {f"b{i}": draw_values(c, rng) for i, c in enumerate(multi)}
    oracle = OracleDiagnoser()
    oracle.prepare(ReferenceCorpus(cases=multi, taxonomy=case_set.taxonomy,
                                   bundle_cases={f"b{i}": c.id for i, c in enumerate(multi)}, bundle_values=shown))
    for i, case in enumerate(multi):
        diagnosis = oracle.diagnose(SimpleNamespace(bundle_id=f"b{i}"))
        result = score_case(case, diagnosis, taxonomy=case_set.taxonomy, evidence=EvidenceFacts(shown_values=shown[f"b{i}"]))
        wrong = [f for f in result.forecasts if f.probability != float(f.outcome)]
        assert wrong == [], (case.id, wrong)
        named = {f.factor for f in diagnosis.findings if f.factor} | set(diagnosis.abstain.factors if diagnosis.abstain else [])
        assert not {(r.name, r.value) for r in named} & {(k, v) for r in case.fleet.runs for k, v in r.metadata.items()}, \
            case.id  # every value named in drawn words, none in the case file's
