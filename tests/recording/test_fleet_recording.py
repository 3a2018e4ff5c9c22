"""Fleet recording and verification (issue 24), cheaply: no recording here (the corpus fixture records the fleet
cases for the leak tests). Members and their repeats, the move onto the fleet's schedule, the permutation test,
the version-style faults' hooks, and what fleet.json says about the corpus' cases."""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

from diageval.bundle.fleet import FLEET_EPOCH, Fleet
from diageval.bundle.model import BundleEnv, EvidenceBundle
from diageval.cases.load import load_case_set
from diageval.cases.model import Case, WorkloadSpec
from diageval.diagnosis import FactorRef
from diageval.fileio import read_jsonl, write_jsonl
from diageval.recording.bundle_writer import write_info
from diageval.recording.faults import FAULTS
from diageval.recording.fleet import draw_runs, fleet_runs, members_with_repeats, move_to_start
from diageval.recording.fleet_verify import FLEET_ALPHA, fleet_effects, permutation_p
from tests.bundle.test_bundle_leaks import forbidden_words
from tests.cases.test_fleet_cases import fleet_case


@pytest.fixture(scope="module")
def corpus():
    return load_case_set()


@pytest.fixture(scope="module")
def fleets(corpus) -> list[Case]:
    return [lc.case for lc in corpus.cases if lc.case.fleet is not None]


def test_runs_with_one_spec_are_its_successive_repeats():
    case = Case.model_validate(fleet_case())
    repeats = [(run.name, bool(member.faults), repeat) for run, member, repeat in members_with_repeats(case)]
    assert [r for _, faulty, r in repeats if not faulty] == [0, 1, 2, 3, 4, 5]
    assert [r for _, faulty, r in repeats if faulty] == [0, 1]


def test_a_regression_records_its_own_pairs():
    from diageval.recording.fleet import repeat_base
    from tests.cases.test_fleet_cases import regression_case

    case = Case.model_validate(regression_case())
    repeats = [repeat for _, _, repeat in members_with_repeats(case)]
    assert repeats[0] == repeats[1] == repeat_base(case) >= 1000  # baseline and candidate: pair 0 of its own block
    other = Case.model_validate(regression_case(id="other", title="another"))  # same spec: same recordings
    assert repeat_base(other) == repeat_base(case)
    assert repeat_base(Case.model_validate(fleet_case())) == 0


def test_the_permutation_test_is_exact():
    # 3 runs above all 5 others: the observed split is the most extreme of C(8, 3) = 56
    stat, p, count = permutation_p([3.0, 3.1, 3.2], [1.0, 1.1, 1.2, 1.3, 1.4])
    assert count == 56 and p == pytest.approx(1 / 56) and stat == pytest.approx(3.1 - 1.2)
    # no difference at all: every split is at least as large
    assert permutation_p([1.0, 1.0], [1.0, 1.0, 1.0])[1] == 1.0
    with pytest.raises(ValueError, match="both sides"):
        permutation_p([], [1.0])


def _metrics(case: Case, slow: float, noise: float = 0.0) -> dict[str, float]:
    faulty = {r.name for r in case.fleet.runs if case.fleet.faults_of(r)}
    return {r.name: 0.1 * (slow if r.name in faulty else 1.0) * (1 + noise * ((i % 3) - 1)) for i, r in enumerate(case.fleet.runs)}


def test_a_gross_fault_behind_its_value_manifests_and_a_small_one_does_not():
    case = Case.model_validate(fleet_case())
    (effect,) = fleet_effects(case, _metrics(case, slow=2.0, noise=0.1))
    assert effect.factor == FactorRef(name="host", value="node-07") and effect.runs_with == 2 and effect.runs_without == 6
    assert effect.manifested and effect.p_value == pytest.approx(1 / 28) and effect.ratio == pytest.approx(2.0, rel=0.2)
    (small,) = fleet_effects(case, _metrics(case, slow=1.05, noise=0.3))
    assert not small.manifested and small.alpha == FLEET_ALPHA


def _tiny_bundle(root: Path) -> Path:
    root.mkdir()
    t0 = 1_700_000_000.0
    write_jsonl(root / "steps.jsonl", [{"rank": 0, "step": s, "t_start": t0 + s, "t_end": t0 + s + 0.5} for s in range(3)])
    write_jsonl(root / "metrics.jsonl", [{"time": t0 + 0.2, "scope": "host", "cpu_percent": 50.0},
                                         {"time": t0 + 0.2, "scope": "rank", "rank": 0, "cpu_percent": 40.0}])
    (root / "rank0").mkdir()
    trace = {"baseTimeNanoseconds": 1_699_999_000_000_000_000, "traceEvents": [
        {"ph": "X", "name": "ProfilerStep#1", "ts": (t0 + 1) * 1e6 - 1_699_999_000_000_000, "dur": 5.0, "pid": 1, "tid": 1}]}
    with gzip.open(root / "rank0" / "trace.json.gz", "wt") as fh:
        json.dump(trace, fh)
    write_info(root, BundleEnv(device="cpu", world_size=1))
    return root


def test_a_member_is_moved_onto_the_fleets_schedule(tmp_path):
    root = _tiny_bundle(tmp_path / "m")
    before = EvidenceBundle.open(root).bundle_id
    start = datetime(2026, 1, 5, 9, 0, tzinfo=timezone.utc)
    move_to_start(root, start)
    bundle = EvidenceBundle.open(root)
    assert bundle.verify_checksums() == [] and bundle.bundle_id != before and bundle.manifest.created == start
    steps = bundle.steps()
    assert steps[0].t_start == pytest.approx(start.timestamp()) and steps[1].duration == pytest.approx(0.5)
    rows = list(read_jsonl(root / "metrics.jsonl"))
    assert all(r["time"] == pytest.approx(start.timestamp() + 0.2) for r in rows)  # host and rank rows alike
    with gzip.open(root / "rank0" / "trace.json.gz", "rt") as fh:
        doc = json.load(fh)
    (event,) = doc["traceEvents"]
    absolute_s = (doc["baseTimeNanoseconds"] / 1e3 + event["ts"]) / 1e6  # the step marker on the host clock
    assert absolute_s == pytest.approx(start.timestamp() + 1, abs=1e-3)


def test_the_version_faults_are_registered_with_causes_and_checks():
    assert FAULTS["costly_profiling"].injects == ("measurement.profiler_overhead",)
    assert FAULTS["wider_numbers"].injects == ("compute.numeric_precision",)
    assert FAULTS["recompiling_model"].injects == ("compile.recompilation",)
    info = FAULTS["recompiling_model"]
    problems = info.check(info.params_model(), WorkloadSpec(name="mlp_ddp", steps=8))
    assert problems and problems[0][0] == "graph_compiler" and "keeps one shape" in problems[0][1]
    assert info.check(info.params_model(), WorkloadSpec(name="transformer_lm", steps=8)) == []


def test_the_version_faults_hooks():
    import torch

    from diageval.recording.faults.base import Injection
    from diageval.recording.faults.versions import CostlyProfiling, WiderNumbers

    profiling = CostlyProfiling(FAULTS["costly_profiling"].params_model(), ctx=None)
    assert Injection([profiling]).profiler_options() == {"with_stack": True, "profile_memory": True}
    assert Injection([]).profiler_options() == {}
    wide = WiderNumbers(FAULTS["wider_numbers"].params_model(), ctx=None)
    x, y = wide.dataset([(torch.ones(2, 3), torch.tensor([1, 0]))])[0]
    assert x.dtype == torch.float64 and y.dtype == torch.int64
    assert next(wide.model(torch.nn.Linear(3, 2)).parameters()).dtype == torch.float64


# --- what fleet.json says about the corpus' cases (no recording: fleet.json is built from the case alone) ------


def test_no_fleet_json_of_the_corpus_names_a_case_fault_or_cause(corpus, fleets):
    words = forbidden_words(corpus)
    for case in fleets:
        text = Fleet(runs=fleet_runs(case, draw_runs(case, seed=0))).model_dump_json().lower()
        assert [w for w in words if w in text] == [], case.id


def _pick(fleet: Fleet, how: str) -> set[FactorRef]:
    """Label-blind guesses at the factor value at fault, from fleet.json alone."""
    values = [FactorRef(name=f, value=v) for f in fleet.factors for v in fleet.values(f)]
    size = {ref: len(fleet.runs_with(ref)) for ref in values}
    if how == "rarest":
        return {min(values, key=lambda r: (size[r], r.name, r.value))}
    if how == "last_value":  # the lexicographically last value of each factor (a newer version, a higher node)
        return {FactorRef(name=f, value=fleet.values(f)[-1]) for f in fleet.factors}
    if how == "latest_runs":  # the values of the last run to start
        last = fleet.ordered()[-1]
        return {FactorRef(name=k, value=v) for k, v in last.metadata.items()}
    raise ValueError(how)


@pytest.mark.parametrize("how", ["rarest", "last_value", "latest_runs"])
def test_no_label_blind_rule_on_fleet_json_finds_the_factor_at_fault(how, fleets):
    """Over the positive fleet and regression cases, a rule reading only fleet.json (the rarest value, the last
    value of each factor, the values of the last run to start) hits a labeled factor value in at most half of the
    cases; and no single value (a host name, a version) is the one at fault in most of them."""
    positives = [c for c in fleets if c.labels.expect == "diagnose" and c.kind == "fleet"]
    assert len(positives) >= 5
    hits = 0
    for case in positives:
        labeled = {c.factor for c in case.labels.causes}
        hits += bool(_pick(Fleet(runs=fleet_runs(case, draw_runs(case, seed=0))), how) & labeled)
    assert hits <= len(positives) / 2, f"{how}: {hits} of {len(positives)}"
    at_fault = Counter(c.factor for case in positives for c in case.labels.causes)
    assert max(at_fault.values()) <= len(positives) / 2, at_fault


def test_every_public_regression_changes_two_factors_and_names_the_one_at_fault(fleets):
    """Issue 39 item 2: with one differing factor, "name the candidate's differing value" was the answer by
    construction. Every injected public regression's candidate changes two or more declared factors (a release: a
    version and a host or config move together); a positive one's label names one of them, and no factor name is the
    one at fault in every positive regression that changes it. The recorded pair is left out: its metadata states
    what its real traces came from (one libkineto build and the next), and a made-up second factor would misstate it."""
    regressions = [c for c in fleets if c.kind == "regression" and c.workload is not None and c.split == "public"]
    assert len(regressions) >= 15
    faulty: Counter = Counter()
    changed: Counter = Counter()
    for case in regressions:
        values = case.fleet.changed_values()
        assert len({v.name for v in values}) >= 2, (case.id, values)
        for label in case.labels.causes:
            assert label.factor in values, case.id
            faulty[label.factor.name] += 1
        if case.labels.expect == "diagnose":
            changed.update(v.name for v in values)
    assert len(faulty) >= 2 and all(faulty[name] < n for name, n in changed.items()), (faulty, changed)


def test_the_corpus_holds_the_hard_fleets_issue_24_asks_for(fleets):
    assert len(fleets) >= 12
    aliased = [c for c in fleets if c.labels.aliased]
    healthy = [c for c in fleets if c.labels.expect == "healthy"]
    two = [c for c in fleets if len({x.factor for x in c.labels.causes}) >= 2]
    noise_bounded = [c for c in fleets if c.labels.expect == "abstain" and not c.labels.aliased and c.fleet.faults]
    assert len(aliased) >= 2 and healthy and two and noise_bounded
    assert len(aliased) + len(healthy) + len(two) + len(noise_bounded) >= 4
    for case in aliased:  # the aliased values are the faulty value and its alias, held by exactly the same runs
        (where,) = {ff.where for ff in case.fleet.faults}
        assert where in case.labels.aliased
        assert set(case.labels.aliased) - {where} <= set(case.fleet.aliased_with(where))
    assert math.isclose(FLEET_EPOCH.timestamp() % 60, 0)


# --- the recorded regression pair (kineto's before/after traces; skipped without the data folder) ----------------

def _recorded_pairs(fleets: list[Case]) -> list[Case]:
    return [c for c in fleets if c.workload is None]


def test_a_recorded_pair_is_labeled_from_its_measured_figures(fleets, tmp_path):
    from diageval.bundle.fleet import read_fleet
    from diageval.bundle.trace_stats import trace_stats
    from diageval.bundle.trace_stats_table import summary_rows
    from diageval.cases.load import LoadedCase
    from diageval.paths import real_traces_dir
    from diageval.recording import RecordingPolicy, prepare_evidence

    pairs = _recorded_pairs(fleets)
    assert pairs, "the corpus names no recorded regression"
    data = real_traces_dir()
    if data is None or not (data / "gpu-jobs").is_dir():
        pytest.skip(f"real traces not found ({data}; set $DIAGEVAL_DATA)")
    for case in pairs:
        durations = []
        for run in case.fleet.ordered():
            for measured in run.recorded.measured.figures:
                rows = dict(summary_rows(trace_stats(data / measured.file)))
                for name, value in measured.figures.items():
                    assert rows.get(name) == value, f"{case.id}: {run.name}: {measured.file}: {name!r}"
            doc = json.loads((data / run.recorded.files[0].path).read_text())
            events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
            t0 = min(e["ts"] for e in events)
            durations.append(sorted((e["name"], round(e["ts"] - t0, 3), e["dur"]) for e in events))
        if case.labels.expect == "healthy":  # no regression: the same events, offsets and durations in both runs
            assert durations[0] == durations[1], case.id
        prepared = prepare_evidence(LoadedCase(case=case, path=Path(f"{case.id}.yaml"), file_sha256=""),
                                    RecordingPolicy(data_dir=data, cache_dir=tmp_path))
        bundle = EvidenceBundle.open(prepared.bundle_dir)
        fleet = read_fleet(bundle)
        assert bundle.verify_checksums() == [] and fleet.is_regression and prepared.verification is None
        assert fleet.open_run(fleet.role("candidate").name).trace_paths()


@pytest.mark.parametrize("kind", ["regression", "fleet"])
def test_force_records_every_member_and_pair_again_once(kind, tmp_path, monkeypatch):
    """`verify --force` promises new recordings: a fleet's members and a regression's pairs are recorded again,
    each once (pair 0 is the fleet bundle's, forced with it), and without --force nothing is recorded twice."""
    import itertools

    import diageval.recording.cache as cache_module
    from diageval.recording.fleet_verify import fleet_evidence
    from tests.fleet_fakes import member_bundle
    from tests.cases.test_fleet_cases import regression_case

    calls: list[tuple[str, int, bool]] = []
    made: dict[tuple[str, int], Path] = {}
    serial = itertools.count()

    def fake_ensure_bundle(member, device, *, repeat=0, cache_dir=None, force=False, **_):
        calls.append((member.id, repeat, force))
        key = (member.id, repeat)
        if key not in made or force:
            folder = tmp_path / "members" / f"{member.id}-{repeat}-{next(serial)}"
            made[key] = member_bundle(folder, median_s=0.3 if member.faults else 0.1, noise=0.01, seed=len(made))
        return f"{member.id}-{repeat}", made[key], True

    monkeypatch.setattr(cache_module, "ensure_bundle", fake_ensure_bundle)
    case = Case.model_validate(regression_case() if kind == "regression" else fleet_case())
    fleet_evidence(case, device="cpu", cache_dir=tmp_path / "cache")
    first = list(calls)
    assert first and not any(force for *_, force in first)
    calls.clear()
    fleet_evidence(case, device="cpu", cache_dir=tmp_path / "cache", force=True)
    recorded = [(m, r) for m, r, force in calls if force]
    assert sorted(recorded) == sorted(set((m, r) for m, r, _ in first))  # each one again, and once


# --- issue 44 item 1: what an assembly draws -------------------------------------------------------------------


def test_a_draw_renames_every_run_and_reorders_a_fleet_but_not_a_regression():
    from tests.cases.test_fleet_cases import regression_case

    fleet = Case.model_validate(fleet_case())
    draws = [draw_runs(fleet, seed) for seed in range(20)]
    case_names = {r.name for r in fleet.fleet.runs}
    for draw in draws:
        assert set(draw.names) == case_names and not set(draw.names.values()) & case_names
        assert len(set(draw.names.values())) == len(case_names)
        assert sorted(draw.starts.values()) == list(range(len(case_names)))
        runs = fleet_runs(fleet, draw)  # fleet.json: drawn names, listed in drawn start order, drawn value words
        assert [r.start for r in runs] == sorted(r.start for r in runs)
        by_case = {draw.names[r.name]: r for r in fleet.fleet.runs}
        assert all(draw.shown_metadata(by_case[r.name].metadata) == r.metadata for r in runs)
    assert len({tuple(d.starts[n] for n in sorted(case_names)) for d in draws}) == 20  # orders differ between draws
    assert draw_runs(fleet, 3) == draws[3]  # the seed (kept in the truth record) gives the draw again
    pair = Case.model_validate(regression_case())
    for seed in range(5):
        runs = fleet_runs(pair, draw_runs(pair, seed))
        assert [r.role for r in runs] == ["baseline", "candidate"] and {r.name for r in runs}.isdisjoint({"job-base", "job-cand"})


def test_a_draw_shows_every_value_in_a_word_of_its_shape_that_is_none_of_the_cases():
    """Issue 39 item 2: value words reused across the public cases predicted the label (``v2.5.0``); each assembly
    draws them. Per factor the drawn words are distinct, none is one of the case's own words for the factor, they keep
    the value's shape (letters and punctuation), and they differ between draws."""
    import re

    fleet = Case.model_validate(fleet_case())
    draws = [draw_runs(fleet, seed) for seed in range(20)]
    for draw in draws:
        for name in fleet.fleet.factors:
            values = sorted({r.metadata[name] for r in fleet.fleet.runs})
            shown = [draw.values[f"{name}={v}"] for v in values]
            assert len(set(shown)) == len(values) and not set(shown) & set(values), (name, shown)
            assert all(re.sub(r"\d", "0", a) == re.sub(r"\d", "0", b) for a, b in zip(values, shown)), shown
    assert len({tuple(sorted(d.values.items())) for d in draws}) == 20
    assert draw_runs(fleet, 3).values == draws[3].values  # the seed gives the words again


def test_a_diagnosis_is_judged_in_the_words_its_bundle_showed():
    """The oracle, naming its labels in the drawn words (as the run hands them to it), is right; a diagnoser naming
    the public case file's word for the same value names nothing the bundle showed, and is wrong."""
    from diageval.cases.taxonomy import load_taxonomy
    from diageval.diagnosis import Diagnosis, Finding
    from diageval.scoring.results import EvidenceFacts
    from diageval.scoring.verdicts import score_case
    from tests.cases.test_fleet_cases import two_factor_regression

    case = Case.model_validate(two_factor_regression())
    draw = draw_runs(case, 7)
    label = case.labels.causes[0]
    shown = case.with_shown_values(draw.values).labels.causes[0].factor
    assert shown != label.factor and shown.value == draw.values[f"{label.factor.name}={label.factor.value}"]

    def facts(ref):
        d = Diagnosis(findings=[Finding(category=label.category, kind="cause", confidence=1.0, factor=ref)])
        result = score_case(case, d, taxonomy=load_taxonomy(), evidence=EvidenceFacts(shown_values=draw.values))
        return {f.event: (f.probability, f.outcome) for f in result.forecasts if f.kind == "factor"}, result

    right, result = facts(shown)
    assert right[f"factor@{shown.name}={shown.value}"] == (1.0, True) and result.shown_values == draw.values
    wrong, _ = facts(label.factor)  # the case file's word
    assert wrong[f"factor@{label.factor.name}={label.factor.value}"] == (1.0, False)


def test_each_assembly_draws_anew_and_the_verification_reads_the_runs_under_the_case_names(tmp_path, monkeypatch):
    import diageval.recording.cache as cache_module
    from diageval.bundle.fleet import read_fleet
    from diageval.recording.cache import cache_key, read_truth
    from diageval.recording.fleet_verify import fleet_evidence, fleet_verification_path
    from tests.fleet_fakes import member_bundle

    def fake_ensure_bundle(member, device, *, repeat=0, cache_dir=None, force=False, **_):
        folder = tmp_path / "members" / f"{member.id}-{repeat}"
        if not folder.exists():
            member_bundle(folder, median_s=0.3 if member.faults else 0.1, noise=0.01, seed=repeat)
        return f"{member.id}-{repeat}", folder, True

    monkeypatch.setattr(cache_module, "ensure_bundle", fake_ensure_bundle)
    case = Case.model_validate(fleet_case())
    case_names = {r.name for r in case.fleet.runs}
    seen = []
    for cache in (tmp_path / "a", tmp_path / "b"):
        folder, verification = fleet_evidence(case, device="cpu", cache_dir=cache)
        fleet = read_fleet(EvidenceBundle.open(folder))
        names = {r.name for r in fleet.runs}
        assert not names & case_names
        key = cache_key(case, "cpu")
        draw = read_truth(cache, key).fleet_draw
        assert draw is not None and set(draw.names.values()) == names
        assert draw.names.keys() == case_names
        texts = [f.read_bytes() for f in folder.rglob("*") if f.is_file() and not f.name.endswith(".gz")]
        assert not [n for n in case_names for t in texts if n.encode() in t]  # no case run name in any file of the bundle
        stored = json.loads(fleet_verification_path(cache, key).read_text())
        assert set(stored["run_metric"]) == case_names and verification.manifested
        slow = {r.name for r in case.fleet.runs if case.fleet.faults_of(r)}
        assert all((stored["run_metric"][n] > 0.2) == (n in slow) for n in case_names)  # each run's own member
        seen.append(names)
    assert seen[0] != seen[1]


def test_a_drawn_run_name_never_holds_a_case_files_run_name():
    """``job-05`` inside a drawn ``job-05a1c3`` names the case's run in fleet.json as surely as ``job-05`` itself: with
    one-hex-digit run names every drawn name would start with one of them, so the draw must step around them."""
    from diageval.recording.fleet import draw_runs

    spec = fleet_case()
    for i, run in enumerate(spec["fleet"]["runs"]):
        run["name"] = f"job-{i:x}"
    case = Case.model_validate(spec)
    for seed in range(20):
        drawn = draw_runs(case, seed).names.values()
        assert not [(n, d) for d in drawn for n in (r.name for r in case.fleet.runs) if n in d]
