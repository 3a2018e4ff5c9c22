"""Issue 44 item 1: a job case is recorded as a drawn variant of itself (harness/recording/draw.py): the culprit's
rank and the step count drawn per recording from a seed outside the box, the labels following the draw, and the
run and its re-scoring reading the labels' ranks from the draw, not from the case file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from run_fakes import FakeEvidence

from diageval.cases.load import check_case, load_case_set
from diageval.recording.draw import (FIXED_RANK, RANK_PARAMS, SCALED_RANK_PARAMS, RecordingDraw, cache_secret,
                                     case_seed, draw_for, drawable, drawn_case, fixed_rank_reason, recorded_as,
                                     step_choices, step_spread)
from diageval.recording.faults import FAULTS


@pytest.fixture(scope="module")
def corpus():
    return load_case_set()


def test_every_fault_that_names_a_rank_says_whether_the_draw_moves_it():
    """The rule is per fault: each parameter that names a rank moves with the draw (RANK_PARAMS) or its fault keeps
    the case's ranks (FIXED_RANK); a new fault with a rank parameter must be put in one of them."""
    for name, info in FAULTS.items():
        rank_fields = {f for f in info.params_model.model_fields if "rank" in f and f != "scaled_world_size"}
        if name in FIXED_RANK:
            continue
        assert rank_fields == set(RANK_PARAMS.get(name, ())) | set(SCALED_RANK_PARAMS.get(name, ())), (name, rank_fields)
    assert not set(RANK_PARAMS) & set(FIXED_RANK)


def test_every_drawn_variant_of_every_case_is_a_valid_case(corpus):
    """Every step count a case may draw, with its ranks reversed where they move, passes the case checks: the fault
    parameters, the labeled ranges and the manifestation check all hold for the drawn case."""
    checked = 0
    for lc in corpus.cases:
        case = lc.case
        if not drawable(case):
            continue
        world = case.workload.world_size
        orders = [list(range(world))] + ([list(reversed(range(world)))] if fixed_rank_reason(case) is None else [])
        follow = not any(f.name in SCALED_RANK_PARAMS for f in case.faults)
        choices = step_choices(case)
        assert case.workload.steps in choices
        assert all(abs(n - case.workload.steps) <= step_spread(case.workload.steps) for n in choices)
        for steps in choices:
            for ranks in orders:
                drawn = drawn_case(case, RecordingDraw(seed=0, ranks=ranks, steps=steps, declared_steps=case.workload.steps,
                                                       labels_follow=follow))
                assert check_case(drawn, str(lc.path), corpus.taxonomy) == [], (case.id, steps, ranks)
                checked += 1
    assert checked > 500



def test_a_drawn_step_count_keeps_a_periodic_fault_s_events_in_the_profiled_steps(corpus):
    """A save every N steps: every count a case may draw traces as many saves as its declared count does (the
    profiler records the last trace_steps steps, rank_worker.profiler_window). slow-checkpoint-convnet-16 (a save
    every 4 steps from step 3, 3 steps traced) could draw 19 steps, whose traced 16-18 hold no save: its shown trace
    then held nothing of its label (a fresh CI's null run judged it invalid, the save at +1% of the step)."""
    from diageval.recording.rank_worker import profiler_window
    from diageval.recording.workloads import WORKLOADS

    checked = 0
    for lc in corpus.cases:
        case = lc.case
        saves = [f for f in case.faults if f.name == "blocking_checkpoint"]
        if not drawable(case) or not saves:
            continue
        trace_steps = WORKLOADS[case.workload.name].params_model.model_validate(case.workload.params).trace_steps

        def traced_saves(steps: int) -> int:
            _, _, active = profiler_window(steps, trace_steps)
            return sum(1 for f in saves for s in range(int(f.params.get("start_step", 0)), steps)
                       if (s + 1) % int(f.params["save_every_steps"]) == 0 and s >= steps - active)

        declared = traced_saves(case.workload.steps)
        for steps in step_choices(case):
            assert traced_saves(steps) == declared, (case.id, steps)
            checked += 1
    assert checked >= 8

def test_the_label_follows_the_drawn_rank_and_fixed_ranks_stay(corpus):
    """Over seeds a 2-rank straggler lands on either rank, and its label, the fault and every evidence edit naming a
    recorded rank move together; a checkpoint case (rank 0 saves) never moves; a scaled-out case's recorded ranks
    move while its labels (scaled ranks) stay; a kept window of profiled steps stays where it was."""
    moved = set()
    for seed in range(40):
        d = drawn_case(corpus.get("straggler-rank1-clock-offset").case,
                       draw_for(corpus.get("straggler-rank1-clock-offset").case, seed))
        fault = {f.name: f.params for f in d.faults}
        assert d.labels.causes[0].ranks == [fault["slow_rank"]["target_rank"]]
        assert fault["clock_offset"]["offset_rank"] == fault["slow_rank"]["target_rank"]  # both named rank 1
        assert d.labels.causes[0].steps[1] == d.workload.steps
        moved.add(fault["slow_rank"]["target_rank"])
        c = corpus.get("slow-checkpoint-every-5").case
        assert draw_for(c, seed).ranks == [0, 1] and drawn_case(c, draw_for(c, seed)).labels.causes[0].ranks == [0]
        scaled = corpus.get("straggler-1-of-128").case
        d = draw_for(scaled, seed)
        out = drawn_case(scaled, d)
        params = next(f.params for f in out.faults if f.name == "scale_out")
        assert [c.ranks for c in out.labels.causes] == [[109]] and params["kept_at_rank"] == 109
        assert params["kept_rank"] == next(f.params for f in out.faults if f.name == "slow_rank")["target_rank"]
        assert d.labeled_ranks is None
        late = corpus.get("stall-late-window-before").case
        window = next(f.params for f in drawn_case(late, draw_for(late, seed)).faults if f.name == "trace_window")
        assert window["window_first_step"] + window["window_steps"] <= 25  # still ends before the stall
    assert moved == {0, 1}


def test_a_draw_is_deterministic_per_secret_and_shared_with_the_derived_cases(corpus, tmp_path):
    """The seed comes from the cache's secret and the case's recording spec: the same cache draws the same again
    (a cached recording is found), another cache draws anew, and a case derived by evidence edits draws what the
    case it is derived from draws (they share one recording)."""
    base, derived = corpus.get("starved-loader-mlp").case, corpus.get("starved-loader-one-rank-traced").case
    assert base.workload == derived.workload and [f for f in derived.faults if f.name != "sample_rank_traces"] == base.faults
    one, two = tmp_path / "one", tmp_path / "two"
    assert cache_secret(one) == cache_secret(one) != cache_secret(two)
    assert recorded_as(base, one) == recorded_as(base, one)
    assert case_seed(base, cache_secret(one)) == case_seed(derived, cache_secret(one))
    assert recorded_as(base, one)[1].steps == recorded_as(derived, one)[1].steps
    seeds = {case_seed(base, cache_secret(tmp_path / f"c{i}")) for i in range(5)}
    assert len(seeds) == 5
    scaled, straggler = corpus.get("straggler-1-of-128").case, corpus.get("straggler-rank1").case  # one live spec
    shared = 0
    for i in range(40):
        seed = case_seed(straggler, f"s{i}")
        a, b = draw_for(straggler, seed), draw_for(scaled, seed)
        assert a.ranks == b.ranks and (a.steps == b.steps or a.steps not in step_choices(scaled))
        shared += a.steps == b.steps
    assert shared >= 20  # the scaled case shares its base's recording unless its window rules the count out
    assert recorded_as(corpus.get("kineto-doc-trace-order-pair").case, one) == (corpus.get("kineto-doc-trace-order-pair").case, None)


def test_with_rank_draw_puts_the_labels_where_the_draw_did(corpus):
    case = corpus.get("straggler-and-starved-loader").case
    assert case.with_rank_draw(None) is case and case.with_rank_draw([0, 1]) is case
    swapped = case.with_rank_draw([1, 0])
    assert [c.ranks for c in swapped.labels.causes] == [[0] if c.ranks == [1] else c.ranks for c in case.labels.causes]


class DrawnEvidence(FakeEvidence):
    """FakeEvidence whose every recording drew its ranks reversed."""

    def __call__(self, loaded, policy):
        draw = RecordingDraw(seed=1, ranks=[1, 0], steps=30, declared_steps=30)
        return super().__call__(loaded, policy).model_copy(update={"draw": draw})


def test_a_run_and_its_rescoring_judge_ranks_where_the_recording_put_them(tmp_path):
    """The run scores a drawn recording against the drawn ranks: oracle (handed the labels the run scores) localises
    every cause; the ranks the case file names are mislocated. The result line keeps the draw, so re-scoring from the
    run folder alone judges the same (on main the case file's ranks were read: oracle's drawn claims mislocated)."""
    from run_fakes import make_case, make_case_set, run_with

    from diageval.run.grade import rescore_run
    from diageval.run.store import RunStore

    case_set = make_case_set([make_case("d1", ranks=[1]), make_case("d2", ranks=[0])])
    evidence = DrawnEvidence(tmp_path / "bundles")
    out = run_with("oracle", case_set, cases_dir=tmp_path / "cases", out_dir=tmp_path / "runs", evidence_fn=evidence,
                   progress=None, cuda_device_count=lambda: 0, timeout=5.0)
    results = {r.case_id: r for r in RunStore(out.run_dir).read_results()}
    assert {cid: r.rank_draw for cid, r in results.items()} == {"d1": [1, 0], "d2": [1, 0]}
    assert {cid: r.outcomes[0].ranks for cid, r in results.items()} == {"d1": [0], "d2": [1]}
    assert all(o.localized for r in results.values() for o in r.outcomes)
    assert out.summary.metrics.skill_ranked.value == 1.0
    again = rescore_run(out.run_dir, case_set=case_set)
    assert again.metrics.skill_ranked.value == 1.0
    assert {r.case_id: r.outcomes[0].ranks for r in RunStore(out.run_dir).read_results()} == {"d1": [0], "d2": [1]}
