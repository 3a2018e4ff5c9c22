"""The ``agent`` diagnoser against a loopback OpenAI-compatible server serving scripted models (issue 41, item 6).

Only the model is scripted (``fake_openai_server.FakeChatServer(model=...)``): the endpoint client, the MCP tool
server and its tools, the caps, the box and the scoring are the real ones. The models:

* ``investigator``: reads the overview, compares the ranks with the real tools, and names the slower rank it finds
  in their answers (so a wrong tool answer gives a wrong diagnosis);
* ``looper``: asks for the step table forever (the turn cap ends it);
* ``malformed``: answers JSON that is no diagnosis (``invalid_output``);
* ``escaper``: asks the tools for files outside the bundle, then answers with what the tools returned;
* ``staller``: never answers in time (the wall-time cap ends it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("openai")
pytest.importorskip("mcp")

from fake_openai_server import FakeChatServer, Stall, ToolCalls, Usage  # noqa: E402
from run_fakes import FakeEvidence, make_case, make_case_set, run_with  # noqa: E402
from scripted_models import label_hunter  # noqa: E402
from synthetic_traces import StepShape, build_bundle  # noqa: E402

from diageval.bundle.model import EvidenceBundle  # noqa: E402
from diageval.diagnosers.agent_record import AgentRecord  # noqa: E402
from diageval.diagnosers.agent_tools import BundleTools, ToolRefused  # noqa: E402
from diageval.hosting import HostPolicy  # noqa: E402
from diageval.run.single import diagnose_bundle  # noqa: E402
from diageval.run.store import RunStore  # noqa: E402

SLOW_RANK = 1


def straggler(rank: int, step: int) -> StepShape:
    return StepShape(compute_us=9000.0 if rank == SLOW_RANK else 4000.0)


def _tool_results(body: dict) -> list[str]:
    return [m["content"] for m in body["messages"] if m.get("role") == "tool"]


def investigator(body: dict):
    """Three turns: the overview, then the two ranks compared, then a diagnosis read off the comparison."""
    done = _tool_results(body)
    if not done:
        return ToolCalls([("overview", {})], content="Looking at the bundle first.")
    if len(done) == 1:
        ranks = json.loads(done[0])["ranks_with_trace"]
        return ToolCalls([("compare_ranks", {"rank_a": ranks[0], "rank_b": ranks[1]}),
                          ("top_ops", {"rank": ranks[1], "step": 3})])
    compared = json.loads(done[1])
    a, b = compared["median_ms"]["host_busy"]["a"], compared["median_ms"]["host_busy"]["b"]
    if abs(a - b) < 0.1 * min(a, b):
        return json.dumps({"findings": []})
    slow = compared["rank_a"] if a > b else compared["rank_b"]
    return "```json\n" + json.dumps({"findings": [{
        "category": "compute.straggler_rank", "kind": "cause", "confidence": 0.8, "ranks": [slow],
        "cites": {"ranks": [slow]},  # the rank its tools compared: where a person checks it
        "summary": f"rank {slow} computes {max(a, b):.1f} ms a step against {min(a, b):.1f} ms"}]}) + "\n```"


def looper(body: dict):
    return ToolCalls([("step_table", {})])


def malformed(body: dict):
    return '{"findings": [{"category": "compute.straggler_rank", "confidence": 3}'


def escaper(body: dict):
    done = _tool_results(body)
    if not done:
        return ToolCalls([("read_file", {"path": "../../../../../etc/passwd"}), ("read_file", {"path": "/etc/hostname"}),
                          ("read_file", {"path": "rank0/../../.."}), ("step_table", {"run": "../.."}),
                          ("cat", {"path": "/etc/passwd"})])
    return json.dumps({"findings": [{"category": "symptom.slow_step", "kind": "symptom", "confidence": 0.5,
                                     "summary": " | ".join(done)[:1500]}]})


def staller(body: dict):
    return Stall(60.0)


def _configure(monkeypatch, server, **caps):
    monkeypatch.setenv("AGENT_DIAGNOSER_BASE_URL", server.base_url)
    monkeypatch.setenv("AGENT_DIAGNOSER_MODEL", "scripted")
    monkeypatch.setenv("AGENT_DIAGNOSER_MAX_RETRIES", "0")
    for name, value in caps.items():
        monkeypatch.setenv(f"AGENT_DIAGNOSER_{name.upper()}", str(value))


@pytest.fixture
def straggler_bundle(tmp_path) -> Path:
    return build_bundle(tmp_path / "b", straggler, n_steps=8)


def _diagnose(monkeypatch, tmp_path, bundle_dir, model, usage=None, **caps):
    monkeypatch.setenv("DIAGEVAL_HOME", str(tmp_path / "home"))
    with FakeChatServer(model=model, usage=usage) as server:
        _configure(monkeypatch, server, **caps)
        attempt = diagnose_bundle("agent", bundle_dir, HostPolicy(timeout_s=90, allow_network=True))
    return attempt, server


# --- in the box, one bundle ---------------------------------------------------------------------------------


def test_an_investigating_model_uses_the_tools_in_the_box_and_answers(monkeypatch, tmp_path, straggler_bundle):
    attempt, server = _diagnose(monkeypatch, tmp_path, straggler_bundle, investigator)
    assert attempt.status == "ok", attempt.error
    assert [(f.category, f.ranks) for f in attempt.diagnosis.causes] == [("compute.straggler_rank", [SLOW_RANK])]
    assert len(server.requests) == 3
    first = server.requests[0]["body"]
    names = {t["function"]["name"] for t in first["tools"]}
    assert {"overview", "read_file", "step_table", "trace_summary", "trace_stats", "top_ops", "compare_ranks",
            "events_in_window", "fleet_runs"} <= names
    assert "compute.straggler_rank" in first["messages"][0]["content"]  # the taxonomy reached the box
    top = json.loads(_tool_results(server.requests[2]["body"])[2])
    assert top["steps"]["3"][0]["name"] == "aten::mm"  # the real trace, read through the real reader


def test_a_model_that_loops_ends_at_the_turn_cap(monkeypatch, tmp_path, straggler_bundle):
    attempt, server = _diagnose(monkeypatch, tmp_path, straggler_bundle, looper, max_turns=4)
    assert attempt.status == "cap_hit" and "turns cap" in attempt.error, attempt.error
    assert len(server.requests) == 4
    last = server.requests[-1]["body"]
    assert last["tool_choice"] == "none" and "last turn" in last["messages"][-1]["content"]


def test_a_malformed_answer_is_invalid_output(monkeypatch, tmp_path, straggler_bundle):
    attempt, _ = _diagnose(monkeypatch, tmp_path, straggler_bundle, malformed)
    assert attempt.status == "invalid_output" and "agent answer" in attempt.error, attempt.error


def test_a_tool_refuses_a_path_outside_the_bundle(monkeypatch, tmp_path, straggler_bundle):
    attempt, server = _diagnose(monkeypatch, tmp_path, straggler_bundle, escaper)
    assert attempt.status == "ok", attempt.error
    results = _tool_results(server.requests[1]["body"])
    assert len(results) == 5
    assert all("refused" in r or "no fleet.json" in r for r in results[:4]), results
    assert results[4] == "Unknown tool: cat"  # the SDK's own refusal of a tool it does not serve
    assert not any("root:" in r for r in results)


def test_a_model_that_stalls_ends_at_the_time_cap(monkeypatch, tmp_path, straggler_bundle):
    attempt, _ = _diagnose(monkeypatch, tmp_path, straggler_bundle, staller, max_seconds=6)
    assert attempt.status == "cap_hit" and "seconds cap" in attempt.error, attempt.error
    assert attempt.seconds < 60  # ended by the agent's own deadline, not by the stall nor the harness's timeout


def test_the_dollar_cap_ends_a_case_at_the_prices_given(monkeypatch, tmp_path, straggler_bundle):
    prices = json.dumps({"scripted": {"prompt": 1000.0, "completion": 2000.0, "cached": 100.0}})
    attempt, server = _diagnose(monkeypatch, tmp_path, straggler_bundle, looper,
                                usage=Usage(prompt_tokens=300, completion_tokens=50, cached_tokens=100),
                                max_dollars=0.5, prices=prices)
    # one turn: (200 * 1000 + 100 * 100 + 50 * 2000) / 1e6 = $0.31; the second reaches $0.62 >= $0.50
    assert attempt.status == "cap_hit" and "dollars cap" in attempt.error and len(server.requests) == 2, attempt.error


def test_the_token_cap_ends_a_case_and_bounds_each_completion(monkeypatch, tmp_path, straggler_bundle):
    attempt, server = _diagnose(monkeypatch, tmp_path, straggler_bundle, looper,
                                usage=Usage(prompt_tokens=300, completion_tokens=50), max_tokens=1000)
    assert attempt.status == "cap_hit" and "tokens cap" in attempt.error and len(server.requests) == 3, attempt.error
    assert server.requests[-1]["body"]["max_tokens"] == 1000 - 2 * 350  # the cap bounds the turn's completion


# --- a run: statuses, scoring, the trajectory in the run folder --------------------------------------------


def _run(tmp_path, monkeypatch, model, case_set, usage=None, timeout=90.0, repeats=1, **caps):
    from diageval.paths import default_taxonomy_path

    (tmp_path / "cases").mkdir(exist_ok=True)  # the run's taxonomy, shown in the box as a real run's is
    (tmp_path / "cases" / "taxonomy.yaml").write_bytes(default_taxonomy_path().read_bytes())
    evidence = FakeEvidence(tmp_path / "bundles")
    for lc in case_set.cases:  # the fake evidence step finds these bundles in place and hands them over
        build_bundle(tmp_path / "bundles" / FakeEvidence.bundle_id(lc.case.id), straggler, n_steps=8)
    with FakeChatServer(model=model, usage=usage) as server:
        _configure(monkeypatch, server, **caps)
        out = run_with("agent", case_set, cases_dir=tmp_path / "cases", out_dir=tmp_path / f"runs-{model.__name__}",
                       evidence_fn=evidence, progress=None, cuda_device_count=lambda: 0, timeout=timeout,
                       allow_network=True, repeats=repeats)
    return out, RunStore(out.run_dir)


def test_a_run_scores_the_agent_and_keeps_its_trajectory(monkeypatch, tmp_path):
    monkeypatch.setenv("DIAGEVAL_HOME", str(tmp_path / "home"))
    case_set = make_case_set([make_case("s1", ranks=[SLOW_RANK])])
    prices = json.dumps({"scripted": {"prompt": 2.0, "completion": 8.0}})
    out, store = _run(tmp_path, monkeypatch, investigator, case_set,
                      usage=Usage(prompt_tokens=1000, completion_tokens=100, cached_tokens=400), prices=prices)
    (result,) = store.read_results()
    assert result.status == "ok" and [o.outcome for o in result.outcomes] == ["found"]
    record, problem = store.read_trajectory("s1")
    assert problem is None and isinstance(record, AgentRecord)
    assert record.ended == "answered" and record.model == "scripted"
    u = record.usage
    assert (u.turns, u.tool_calls, u.prompt_tokens, u.completion_tokens, u.cached_tokens) == (3, 3, 3000, 300, 1200)
    assert u.dollars == pytest.approx((3000 * 2.0 + 300 * 8.0) / 1e6) and u.seconds > 0 and not u.estimated
    calls = [c.name for t in record.turns for c in t.tool_calls]
    assert calls == ["overview", "compare_ranks", "top_ops"]
    assert '"ranks_with_trace":[0,1]' in record.turns[0].tool_calls[0].result


HOSTILE = "<script>alert(1)</script>\x1b]52;c;cHduZWQ=\x07\u202eevil"


def test_the_board_and_the_page_show_cost_repeats_grounding_and_trajectories(monkeypatch, tmp_path):
    """Issue 41's "done when": a scripted tool-using agent scored with tokens, turns, dollars, repeats and grounded
    recall on the board and its trajectories in the HTML page, the model's words there made inert."""
    from datetime import datetime, timezone

    from diageval.reports.html import render_html
    from diageval.reports.html_data import gather
    from diageval.reports.leaderboard import render_leaderboard

    def hostile_investigator(body: dict):
        answer = investigator(body)
        if isinstance(answer, ToolCalls) and not _tool_results(body):  # the first turn: words a page must not run
            return ToolCalls([("overview", {})], content=HOSTILE + " " + "x" * 5000)
        return answer

    hostile_investigator.__name__ = "investigator"
    monkeypatch.setenv("DIAGEVAL_HOME", str(tmp_path / "home"))
    case_set = make_case_set([make_case("s1", ranks=[SLOW_RANK]), make_case("s2", ranks=[SLOW_RANK]),
                              make_case("h1", expect="healthy")])  # a control: skill needs a case without the cause
    prices = json.dumps({"scripted": {"prompt": 2.0, "completion": 8.0, "cached": 0.5}})
    out, store = _run(tmp_path, monkeypatch, hostile_investigator, case_set, repeats=2,
                      usage=Usage(prompt_tokens=1000, completion_tokens=100, cached_tokens=400), prices=prices)
    result = next(r for r in store.read_results() if r.case_id == "s1")
    assert result.usage is not None and result.usage.turns == 3 and result.outcomes[0].grounded is True
    summary = out.summary
    m = summary.metrics
    assert (m.turns_per_case.value, m.tool_calls_per_case.value) == (3, 3) and m.turns_per_case.n == 3
    assert (m.prompt_tokens_per_case.value, m.completion_tokens_per_case.value, m.cached_tokens_per_case.value) == (
        3000, 300, 1200)
    assert m.dollars_per_case.value == pytest.approx((1800 * 2.0 + 1200 * 0.5 + 300 * 8.0) / 1e6)
    assert m.grounded_recall.value == 1.0 and m.recall.value == 1.0
    assert summary.repeats is not None and summary.repeats.repeats == 2 and summary.repeats.stable == 3
    assert (out.run_dir / "repeats" / "2" / "cases" / "s1" / "trajectory.json").is_file()

    board = render_leaderboard([summary])
    for text in ("grounded R ↑", "### Cost", "turns/case ↓", "$/case ↓", "prompt tok/case ↓", "tool calls/case ↓",
                 "### Repeats", "| 2 | 3 |"):
        assert text in board, text
    dollars = format(m.dollars_per_case.value, ".3g")
    cost_row = next(line for line in board.splitlines() if line.startswith("| **agent") and f" {dollars} " in line)
    assert cost_row.count("| 3 ") >= 2 and "| 0 |" in cost_row  # turns and tool calls per case; no cap hit

    page = render_html(gather([out.run_dir]), generated=datetime(2026, 1, 1, tzinfo=timezone.utc))
    assert 'id="cost-figure"' in page and "Pareto" in page
    assert "repeats: agent: stable over 2 repeats (right 2, confidently wrong 0)" in page
    assert page.count('class="trajectory"') == 3 and "compare_ranks" in page and "top_ops" in page
    assert "<script>alert" not in page and "\x1b" not in page and "\u202e" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\\u001b]52" in page  # shown, inert and escaped
    assert "more characters in" in page and "x" * 400 not in page  # cut, saying where the rest is


def test_a_cap_hit_is_its_own_status_scored_as_an_abstention(monkeypatch, tmp_path):
    from diageval.run.grade import rescore_run

    monkeypatch.setenv("DIAGEVAL_HOME", str(tmp_path / "home"))
    case_set = make_case_set([make_case("s1", ranks=[SLOW_RANK]), make_case("h1", expect="healthy")])
    out, store = _run(tmp_path, monkeypatch, looper, case_set, max_turns=3)
    results = {r.case_id: r for r in store.read_results()}
    for r in results.values():
        assert r.status == "cap_hit" and r.scored and r.abstained and "turns cap" in r.abstain_reason
        assert not r.verdicts  # no claim: it misleads nobody
    assert [o.outcome for o in results["s1"].outcomes] == ["missed"]
    summary = store.read_summary()
    assert summary.counts.statuses.get("cap_hit") == 2 and summary.counts.scored == 2
    record, _ = store.read_trajectory("s1")
    assert record.ended == "cap_hit" and record.cap == "turns" and record.usage.turns == 3
    assert record.usage.tool_calls == 2 and record.usage.estimated is False
    rescored = rescore_run(out.run_dir, case_set=case_set)  # grading reads the status back: the same abstention
    assert rescored.counts.statuses == summary.counts.statuses


def test_a_case_the_harness_kills_keeps_the_trajectory_it_had(monkeypatch, tmp_path):
    """A time cap above the run's --timeout: the harness kills the worker first (status timeout), and the run folder
    still says what the agent had done: the record written before and after each turn."""
    monkeypatch.setenv("DIAGEVAL_HOME", str(tmp_path / "home"))
    calls = []

    def slow_second_turn(body: dict):
        calls.append(1)
        return ToolCalls([("step_table", {})]) if len(calls) == 1 else Stall(60.0)

    slow_second_turn.__name__ = "slow"
    _, store = _run(tmp_path, monkeypatch, slow_second_turn, make_case_set([make_case("s1", ranks=[SLOW_RANK])]),
                    timeout=20.0, max_seconds=120)  # 20 s: the tool server starts in ~4 s under load here
    (result,) = store.read_results()
    assert result.status == "timeout"
    record, problem = store.read_trajectory("s1")
    assert problem is None and record.ended == "running" and record.usage.turns == 1
    assert [c.name for c in record.turns[0].tool_calls] == ["step_table"]


# --- the tools and the record, without a model --------------------------------------------------------------


def test_the_tools_read_only_the_bundle(tmp_path, straggler_bundle):
    (tmp_path / "secret.txt").write_text("label: compute.straggler_rank\n")
    (straggler_bundle / "logs").mkdir(exist_ok=True)
    (straggler_bundle / "logs" / "link.log").symlink_to(tmp_path / "secret.txt")
    tools = BundleTools(straggler_bundle)
    for path in ("../secret.txt", str(tmp_path / "secret.txt"), "logs/link.log", "rank0/../../secret.txt", ""):
        with pytest.raises(ToolRefused, match="refused|relative"):
            tools.read_file(path)
    with pytest.raises(ToolRefused, match="no trace for rank 7"):
        tools.trace_summary(7)
    assert tools.read_file("steps.jsonl", max_chars=50)["more"] is True


def test_a_fleet_is_read_run_by_run(tmp_path):
    from fleet_fakes import fleet_bundle, fleet_metadata

    bundle = fleet_bundle(tmp_path, [{"median_s": 0.1, "noise": 0.01, "metadata": fleet_metadata(i)} for i in range(3)])
    tools = BundleTools(bundle.root)
    runs = tools.fleet_runs()
    assert runs["fleet"] and len(runs["runs"]) == 3 and runs["runs"][0]["metadata"]
    name = runs["runs"][0]["name"]
    assert tools.step_table(run=name)["ranks"]
    with pytest.raises(ToolRefused, match="no run"):
        tools.step_table(run="../..")


def test_an_unpriced_dollar_cap_and_a_bad_price_table_are_refused(monkeypatch):
    from diageval.diagnosers.agent import AgentDiagnoser
    from diageval.diagnosers.base import DiagnoserUnavailable

    monkeypatch.setenv("AGENT_DIAGNOSER_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("AGENT_DIAGNOSER_MODEL", "m")
    monkeypatch.setenv("AGENT_DIAGNOSER_MAX_DOLLARS", "1")
    with pytest.raises(DiagnoserUnavailable, match="price"):
        AgentDiagnoser()
    monkeypatch.setenv("AGENT_DIAGNOSER_PRICES", '{"m": {"prompt": -1, "completion": 2}}')
    with pytest.raises(DiagnoserUnavailable, match="PRICES"):
        AgentDiagnoser()
    monkeypatch.setenv("AGENT_DIAGNOSER_PRICES", '{"m": {"prompt": 1, "completion": 2}}')
    assert AgentDiagnoser().prices.dollars(1_000_000, 1_000_000, 0) == 3.0


def test_a_malformed_trajectory_is_reported_not_trusted(tmp_path):
    store = RunStore(tmp_path / "run")
    store.case_dir("c1").mkdir(parents=True)
    assert store.read_trajectory("c1") == (None, None)
    (store.case_dir("c1") / "trajectory.json").write_text('{"format": "diageval-trajectory/1", "model": "m", "caps": {}}')
    record, problem = store.read_trajectory("c1")
    assert record is None and "not a diageval trajectory" in problem and "caps" in problem


def test_the_agent_settings_reach_the_box_only_with_the_network():
    on, off = HostPolicy(allow_network=True), HostPolicy()
    assert on.passes("AGENT_DIAGNOSER_API_KEY") and on.passes("AGENT_DIAGNOSER_MAX_TURNS")
    assert not off.passes("AGENT_DIAGNOSER_API_KEY") and not on.passes("OPENAI_API_KEY")  # named with --pass-env only


def test_scoring_reads_a_cap_hit_as_an_abstention_naming_the_cap():
    from diageval.diagnosis import Diagnosis
    from diageval.scoring.verdicts import score_case

    case_set = make_case_set([make_case("s1", ranks=[SLOW_RANK])])
    case = case_set.cases[0].case
    capped = score_case(case, None, taxonomy=case_set.taxonomy, status="cap_hit", error="turns cap: 20 model turns of 20")
    failed = score_case(case, None, taxonomy=case_set.taxonomy, status="timeout", error="no result after 300 s")
    assert capped.status == "cap_hit" and capped.scored and capped.abstained
    assert capped.abstain_reason == "cap_hit: turns cap: 20 model turns of 20"
    assert [o.outcome for o in capped.outcomes] == ["missed"] and not failed.abstained
    abstain = [f for f in capped.forecasts if f.kind == "abstain"]
    assert abstain and abstain[0].probability == 1.0
    with pytest.raises(ValueError, match="no diagnosis"):
        score_case(case, Diagnosis(), taxonomy=case_set.taxonomy, status="cap_hit")


# --- the red team, given the agent's tools ------------------------------------------------------------------

def _hunter(targets: list[str]):
    """The red team's label hunter (``scripted_models.label_hunter``) claiming any cause id of the taxonomy."""
    from diageval.cases.taxonomy import load_taxonomy
    from diageval.paths import default_taxonomy_path

    return label_hunter(targets, [e.id for e in load_taxonomy(default_taxonomy_path()).entries if e.kind == "cause"])


def test_a_label_hunting_model_given_the_tools_scores_like_null(monkeypatch, tmp_path):
    """Issue 41's "done when": the red team given the agent's tools scores like null. The hunter asks the tools for the
    case files and the cache by every path it can name; in the box every such ask is refused and it claims nothing.
    Positive control: the same hunter on a bundle whose log names the cause claims it, so a null score here means the
    routes are closed, not that the hunter is broken."""
    monkeypatch.setenv("DIAGEVAL_HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "bundles").mkdir(parents=True)
    case_set = make_case_set([make_case("hunt-straggler", ranks=[SLOW_RANK]),
                              make_case("hunt-loader", cause="input.dataloader_starvation", fault="dataloader_starvation")])
    (tmp_path / "cases").mkdir()
    for lc in case_set.cases:  # the labeled case files, where a real corpus keeps them
        (tmp_path / "cases" / f"{lc.case.id}.yaml").write_text(lc.case.model_dump_json(), encoding="utf-8")
    (tmp_path / "home" / "bundles" / "index.jsonl").write_text(
        "".join(json.dumps({"case_id": lc.case.id, "cause": lc.case.labels.causes[0].category}) + "\n"
                for lc in case_set.cases), encoding="utf-8")
    targets = [str(tmp_path / "cases" / "hunt-straggler.yaml"), str(tmp_path / "home" / "bundles" / "index.jsonl")]
    hunter = _hunter(targets)

    out, store = _run(tmp_path, monkeypatch, hunter, case_set)
    results = store.read_results()
    assert {r.status for r in results} == {"ok"}
    assert [v for r in results for v in r.verdicts] == []  # no claim at all: null's score
    assert {o.outcome for r in results for o in r.outcomes} == {"missed"}
    for r in results:
        record, _ = store.read_trajectory(r.case_id)
        asked = [c for t in record.turns for c in t.tool_calls if c.name in ("read_file", "step_table")]
        outside = [c for c in asked if any(t.lstrip("/") in c.arguments for t in targets)
                   or "environ" in c.arguments or ".." in c.arguments]
        assert outside and all(c.is_error for c in outside), [(c.arguments, c.result[:120]) for c in outside]

    leaky = build_bundle(tmp_path / "leaky", straggler, n_steps=8)  # the control: a log that names the cause
    (leaky / "logs").mkdir()
    (leaky / "logs" / "rank0.log").write_text("step 3 done\ncompute.straggler_rank\n", encoding="utf-8")
    from diageval.bundle.model import MANIFEST_NAME, BundleManifest, describe_files

    manifest = BundleManifest.model_validate_json((leaky / MANIFEST_NAME).read_text())
    manifest = manifest.model_copy(update={"files": describe_files(leaky)})
    (leaky / MANIFEST_NAME).write_text(manifest.model_dump_json(indent=1))
    attempt, _ = _diagnose(monkeypatch, tmp_path, leaky, hunter)
    assert [f.category for f in attempt.diagnosis.findings] == ["compute.straggler_rank"]
