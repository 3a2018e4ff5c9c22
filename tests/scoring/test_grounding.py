"""Grounded claims (issue 41 item 5): a found cause is grounded when what its claim cites overlaps where the fault
acted, and citing everything grounds nothing."""

from __future__ import annotations

import pytest
from run_fakes import make_case, make_case_set

from diageval.cases.model import Case
from diageval.diagnosis import Citation, Diagnosis, parse_diagnosis_json
from diageval.scoring.grounding import fault_ops, figure_ops, grounded
from diageval.scoring.summary import DiagnoserInfo, summarize
from diageval.scoring.verdicts import score_case

TAXONOMY = make_case_set([]).taxonomy


def _straggler(world: int = 2, rank: int = 1, steps=(14, 20)) -> Case:
    case = make_case("s1", ranks=[rank])
    label = case.labels.causes[0].model_copy(update={"steps": steps})
    return case.model_copy(update={
        "workload": case.workload.model_copy(update={"world_size": world}),
        "labels": case.labels.model_copy(update={"causes": [label]})})


def _sync_case() -> Case:
    data = {"id": "sync", "title": "sync", "workload": {"name": "mlp_ddp", "world_size": 1, "steps": 20},
            "faults": [{"name": "host_device_sync", "params": {"sync_call": "item", "syncs_per_step": 6}}],
            "labels": {"expect": "diagnose", "causes": [{"category": "host.device_sync"}]},
            "manifest": {"metric": "step_time_median", "min_ratio": 1.2}, "requires": {"device": "cuda"}}
    return Case.model_validate(data)


def _claim(cites: dict | None, category: str = "compute.straggler_rank", ranks=None) -> Diagnosis:
    finding = {"category": category, "confidence": 0.9, "ranks": ranks}
    if cites is not None:
        finding["cites"] = cites
    return parse_diagnosis_json(__import__("json").dumps({"findings": [finding]}), "test")


def _outcome(case: Case, cites: dict | None, **kw):
    (o,) = score_case(case, _claim(cites, **kw), taxonomy=TAXONOMY).outcomes
    return o


def test_the_right_rank_and_steps_ground_a_found_cause():
    case = _straggler()
    o = _outcome(case, {"ranks": [1], "steps": [15, 19]})
    assert o.outcome == "found" and o.grounded is True
    assert _outcome(case, {"ranks": [1]}).grounded is True  # one dimension cited, and it overlaps
    assert _outcome(case, {"steps": [14, 20]}).grounded is True


@pytest.mark.parametrize("cites", [
    {"ranks": [0, 1]},                         # every rank of the job: the base rate, says nothing
    {"ranks": list(range(64))},                # more ranks than the job has
    {"steps": [0, 20]},                        # every step the workload ran
    {"steps": [0, 1_000_000]},                 # every step there could be
    {"ranks": [0, 1], "steps": [0, 20]},
    {"ranks": [1], "steps": [0, 5]},           # the right rank, steps before the fault began
    {"ranks": [1], "steps": [6, 20]},          # the right rank, more steps outside the fault than in it
    {"ranks": [0]},                            # the wrong rank
    {},                                        # a citation of nothing
    None,                                      # no citation at all
])
def test_citing_everything_or_off_the_mark_is_not_grounded(cites):
    o = _outcome(_straggler(), cites)
    assert o.outcome == "found"  # the verdict is the same: grounding is judged beside it
    assert o.grounded is False


def test_a_label_over_most_of_a_dimension_does_not_judge_it_so_the_last_step_trick_grounds_nothing():
    case = _straggler(steps=(5, 20))  # 15 of 20 steps: a blind citation of any step lands in the fault
    assert _outcome(case, {"steps": [19, 20]}).grounded is False  # the last step, cited without looking
    assert _outcome(case, {"steps": [5, 20]}).grounded is False   # steps cannot ground this label at all
    assert _outcome(case, {"ranks": [1], "steps": [19, 20]}).grounded is True  # the rank does; steps are not judged
    everywhere_but_time = make_case("e2")  # no ranks; steps over most of the run: nothing to check
    everywhere_but_time = everywhere_but_time.model_copy(update={"labels": everywhere_but_time.labels.model_copy(
        update={"causes": [everywhere_but_time.labels.causes[0].model_copy(update={"steps": (5, 20)})]})})
    assert _outcome(everywhere_but_time, {"steps": [19, 20]}).grounded is None


def test_a_larger_job_grounds_a_citation_that_beats_the_base_rate_and_refuses_all_ranks():
    case = _straggler(world=8, rank=3)
    assert _outcome(case, {"ranks": [3, 4]}).grounded is True   # half of it is the faulty rank, 1/2 > 1/8
    assert _outcome(case, {"ranks": [2, 3, 4]}).grounded is False  # a third: under half
    assert _outcome(case, {"ranks": list(range(8))}).grounded is False


def test_ops_ground_where_the_fault_acts_through_an_op():
    case = _sync_case()
    assert fault_ops(case) == ("aten::item", "aten::_local_scalar_dense")
    assert _outcome(case, {"ops": ["aten::item"]}, category="host.device_sync").grounded is True
    assert _outcome(case, {"ops": ["aten::_local_scalar_dense", "cudaStreamSynchronize"]},
                    category="host.device_sync").grounded is True
    assert _outcome(case, {"ops": ["aten"]}, category="host.device_sync").grounded is False
    everything = ["aten::item"] + [f"aten::op{i}" for i in range(40)]  # every op name of a trace
    assert _outcome(case, {"ops": everything}, category="host.device_sync").grounded is False


def test_a_label_that_localises_nothing_is_not_judged_and_a_miss_is_not_grounded():
    everywhere = make_case("e1")  # no ranks, no steps, a fault that adds no op
    assert _outcome(everywhere, {"ranks": [1]}).grounded is None
    missed = score_case(_straggler(), _claim({"ranks": [1]}, category="input.dataloader_starvation"),
                        taxonomy=TAXONOMY).outcomes[0]
    assert missed.outcome == "missed" and missed.grounded is False
    failed = score_case(_straggler(), None, taxonomy=TAXONOMY, status="timeout").outcomes[0]
    assert failed.grounded is False  # failing where unsure does not leave the denominator


def test_grounded_recall_sits_beside_recall_in_the_summary():
    cases = [_straggler().model_copy(update={"id": f"s{i}"}) for i in range(4)]
    cites = [{"ranks": [1]}, {"ranks": [0, 1]}, None, {"ranks": [1], "steps": [15, 19]}]
    results = [score_case(c, _claim(x), taxonomy=TAXONOMY) for c, x in zip(cases, cites)]
    s = summarize(results, diagnoser=DiagnoserInfo(spec="t", name="t"), case_set_hash="h", taxonomy_version="1",
                  n_boot=50)
    assert s.metrics.recall.value == 1.0
    assert s.metrics.grounded_recall.value == 0.5 and s.metrics.grounded_recall.n == 4


def test_the_citation_is_optional_and_checked():
    assert Diagnosis.model_validate({"findings": [{"category": "x.y"}]}).findings[0].cites is None
    with pytest.raises(ValueError, match="steps"):
        Citation.model_validate({"steps": [5, 5]})
    with pytest.raises(ValueError):
        Citation.model_validate({"ops": ["x"] * 65})


def test_rules_cites_the_ranks_and_steps_it_measured_and_grounds_a_straggler(tmp_path):
    from synthetic_traces import StepShape, build_bundle

    from diageval.bundle.model import EvidenceBundle
    from diageval.diagnosers.rules.diagnoser import RulesDiagnoser

    bundle = build_bundle(tmp_path / "b", lambda rank, step: StepShape(compute_us=9000.0 if rank == 1 else 4000.0),
                          n_steps=8)
    diagnosis = RulesDiagnoser().diagnose(EvidenceBundle.open(bundle))
    (cause,) = [f for f in diagnosis.causes if f.category == "compute.straggler_rank"]
    assert cause.cites is not None and cause.cites.ranks == [1] and cause.cites.steps is not None
    (o,) = score_case(make_case("s1", ranks=[1]), diagnosis, taxonomy=TAXONOMY).outcomes
    assert o.outcome == "found" and o.grounded is True


def test_a_summary_written_before_the_added_metrics_still_reads_them_undefined():
    from diageval.scoring.summary import Summary

    results = [score_case(_straggler(), _claim({"ranks": [1]}), taxonomy=TAXONOMY)]
    s = summarize(results, diagnoser=DiagnoserInfo(spec="t", name="t"), case_set_hash="h", taxonomy_version="1",
                  n_boot=20)
    data = s.model_dump(mode="json")
    for name in ("grounded_recall", "turns_per_case", "dollars_per_case", "prompt_tokens_per_case"):
        del data["metrics"][name]
    del data["repeats"]
    old = Summary.model_validate(data)
    assert old.metrics.grounded_recall.value is None and old.metrics.grounded_recall.n == 0
    assert old.metrics.recall == s.metrics.recall


# --- recorded cases: the figures name what they measured ----------------------------------------------------------


def _recorded(name: str) -> Case:
    from locations import REPO

    from diageval.cases.load import parse_case_file

    case, problems = parse_case_file(REPO / "cases" / "recorded" / f"{name}.yaml")
    assert case is not None, problems
    return case


LOADER_OP = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def test_a_recorded_case_grounds_a_claim_citing_the_op_its_figure_measured():
    """rtx2080ti-resnet-loader-bound: one rank of one (ranks localise nothing), labeled from its figure "DataLoader
    wait: 8204.99 ms (56% of step)"; the loop's DataLoader op is where the fault acted."""
    case = _recorded("rtx2080ti-resnet-loader-bound")
    starved = "input.dataloader_starvation"
    assert figure_ops(case, case.labels.causes[0]) == ("enumerate(DataLoader)",)
    assert _outcome(case, {"ops": [LOADER_OP]}, category=starved).grounded is True
    assert _outcome(case, {"ranks": [0], "ops": [LOADER_OP]}, category=starved).grounded is True
    assert _outcome(case, {"ranks": [0]}, category=starved).grounded is False  # the only rank: says nothing
    every_op = [LOADER_OP] + [f"aten::op{i}" for i in range(40)] + ["cudaFree", "cudaMemcpyAsync"]
    assert _outcome(case, {"ops": every_op}, category=starved).grounded is False
    assert _outcome(case, {"ops": ["cudaFree"]}, category=starved).grounded is False  # another line's calls


def test_a_recorded_figure_that_measured_a_sliver_or_nothing_grounds_nothing():
    """a100-pageable-copy-sync: pageable copies idle the device 92.66 ms a step, 15 syncs 107 us: the copies are
    where the fault acted, the syncs are not; a line quoted at zero names nothing."""
    case = _recorded("a100-pageable-copy-sync")
    sync = "host.device_sync"
    assert _outcome(case, {"ranks": [0], "ops": ["Memcpy DtoH (Device -> Pageable)", "cudaMemcpyAsync"]},
                    category=sync).grounded is True
    assert _outcome(case, {"ranks": [0], "ops": ["cudaStreamSynchronize"]}, category=sync).grounded is False
    assert _outcome(case, {"ranks": [0]}, category=sync).grounded is True  # 1 rank of 16: the rank alone grounds

    loader = _recorded("v100-resnet50-loader-0-workers")
    (measured,) = loader.recorded.measured.figures
    zero = measured.model_copy(update={"figures": {**measured.figures, "DataLoader wait": "0.0 us (0% of step)"}})
    loader = loader.model_copy(update={"recorded": loader.recorded.model_copy(update={
        "measured": loader.recorded.measured.model_copy(update={"figures": [zero]})})})
    assert figure_ops(loader, loader.labels.causes[0]) == ()
    assert _outcome(loader, {"ops": [LOADER_OP]}, category="input.dataloader_starvation").grounded is None
