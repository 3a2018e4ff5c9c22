"""The scripted investigating model (``tests/scripted_models.py``), the baseline ``benchmarks/agent_corpus.py``
runs over the corpus, and the ``time_table`` tool it reads (issue 41: the agent's tools include the time attribution
table). The model runs against the real tools in the box; only the model is scripted."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("openai")
pytest.importorskip("mcp")

from fake_openai_server import FakeChatServer, ToolCalls, Usage  # noqa: E402
from gpu_traces import gpu_trace  # noqa: E402
from scripted_models import SHARE, investigate  # noqa: E402
from synthetic_traces import StepShape, build_bundle  # noqa: E402

from diageval.bundle.importer import import_traces  # noqa: E402
from diageval.diagnosers.agent_tools import BundleTools  # noqa: E402
from diageval.hosting import HostPolicy  # noqa: E402
from diageval.run.single import diagnose_bundle  # noqa: E402


def _gpu_bundle(tmp_path, **kw):
    return import_traces([gpu_trace(tmp_path / "rank0.json.gz", **kw)], tmp_path / "b")


def test_the_time_table_tool_splits_where_a_gpu_ranks_time_went(tmp_path):
    blocked = BundleTools(_gpu_bundle(tmp_path / "sync", pageable_block_us=3000.0, wait_us=0.0)).time_table(0)
    parts = {p["part"]: p for p in blocked["parts"]}
    assert blocked["has_device_events"] and "compute" in parts
    assert parts["sync"]["share"] > 0.2 and parts["sync"]["occurrences"] == 4  # one blocking copy a step, 4 steps
    assert "blocked in a synchronising call" in parts["sync"]["what"]
    assert sum(p["share"] for p in blocked["parts"]) == pytest.approx(1.0, abs=0.01)  # the parts sum to the time
    cpu = BundleTools(build_bundle(tmp_path / "cpu", n_steps=4)).time_table(1)  # the main thread stands in
    assert not cpu["has_device_events"] and {p["part"] for p in cpu["parts"]} >= {"compute"}
    assert all("main thread" in p["what"] or "device" not in p["what"] for p in cpu["parts"])
    assert sum(p["share"] for p in cpu["parts"]) == pytest.approx(1.0, abs=0.01)


def _tool_message(call_id: str, name: str, args: dict, answer: object) -> list[dict]:
    return [{"role": "assistant", "content": "", "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": call_id, "content": json.dumps(answer)}]


def test_the_scripted_model_answers_from_what_the_tools_returned_and_nothing_else():
    """The same conversation with another number in one tool answer gives another diagnosis: the model reads the
    tools, not the case (it has none)."""
    def answer(wait_share: float) -> dict:
        steps = [{"step": n, "ms": 10.0, "data_wait": 10.0 * wait_share, "sync": 0.0, "host_busy": 5.0,
                  "device_busy": 0.0} for n in (3, 4, 5)]
        body = {"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "Diagnose"}]
                + _tool_message("a", "overview", {}, {"ranks_with_trace": [0], "fleet_runs": None})
                + _tool_message("b", "step_table", {}, {"ranks": {}})
                + _tool_message("c", "trace_summary", {"rank": 0}, {"rank": 0, "devices": [], "steps": steps})
                + _tool_message("d", "time_table", {"rank": 0}, {"rank": 0, "parts": []})}
        return json.loads(investigate(body))

    starved = answer(0.4)["findings"]
    assert [(f["category"], f["cites"]) for f in starved] == [
        ("input.dataloader_starvation", {"ranks": [0], "steps": [3, 6]})]
    assert starved[0]["confidence"] == pytest.approx(0.9)
    assert answer(SHARE / 2)["findings"] == []  # under a tenth: healthy
    first = investigate({"messages": [{"role": "user", "content": "Diagnose"}]})
    assert isinstance(first, ToolCalls) and first.calls == [("overview", {})]


@pytest.mark.parametrize("kind, expected", [
    ("straggler", [("compute.straggler_rank", [1])]),
    ("gpu-sync", [("host.device_sync", [0])]),
    ("healthy", []),
])
def test_the_scripted_model_in_the_box_names_what_the_real_tools_show(monkeypatch, tmp_path, kind, expected):
    if kind == "straggler":
        bundle = build_bundle(tmp_path / "b", lambda rank, step: StepShape(compute_us=9000.0 if rank == 1 else 4000.0),
                              n_steps=8)
    elif kind == "gpu-sync":  # a pageable copy idles the device 3 ms of each 10 ms step
        bundle = _gpu_bundle(tmp_path, pageable_block_us=3000.0, wait_us=0.0, gap_us=10.0)  # a full queue
    else:
        bundle = build_bundle(tmp_path / "b", n_steps=8)
    monkeypatch.setenv("DIAGEVAL_HOME", str(tmp_path / "home"))
    with FakeChatServer(model=investigate, usage=Usage(sent=False)) as server:
        monkeypatch.setenv("AGENT_DIAGNOSER_BASE_URL", server.base_url)
        monkeypatch.setenv("AGENT_DIAGNOSER_MODEL", "scripted-investigator")
        monkeypatch.setenv("AGENT_DIAGNOSER_MAX_RETRIES", "0")
        attempt = diagnose_bundle("agent", bundle, HostPolicy(timeout_s=90, allow_network=True))
    assert attempt.status == "ok", attempt.error
    assert [(f.category, f.cites.ranks) for f in attempt.diagnosis.causes] == expected
    asked = {t["function"]["name"] for r in server.requests for m in r["body"]["messages"]
             for t in m.get("tool_calls") or []}
    assert {"overview", "step_table", "trace_summary", "time_table"} <= asked


def test_the_corpus_benchmark_reports_a_label_a_tool_answered_and_not_the_models_own_words():
    """benchmarks/agent_corpus.py's route check: a tool answer that names a label is a route; a refusal that quotes
    the path the model asked for (a case file's, holding its id) hands the model nothing it did not say."""
    import sys

    from locations import REPO

    sys.path.insert(0, str(REPO / "benchmarks"))
    from agent_corpus import routes

    path = "/work/cases/straggler-rank1.yaml"
    messages = (_tool_message("a", "read_file", {"path": path}, f"refused: '{path}' is an absolute path")
                + _tool_message("b", "step_table", {}, {"note": "compute.straggler_rank"}))
    words = {"straggler-rank1": "case id", "compute.straggler_rank": "taxonomy id"}
    found = routes([{"body": {"messages": messages[:2]}}, {"body": {"messages": messages}}], words)
    assert found == ["step_table({}) answered taxonomy id 'compute.straggler_rank'"]
