"""The ``llm`` diagnoser against a loopback server speaking the OpenAI chat protocol."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("openai")

from fake_openai_server import FakeChatServer  # noqa: E402
from synthetic_traces import build_bundle  # noqa: E402

from diageval.bundle.model import EvidenceBundle  # noqa: E402
from diageval.diagnosers.base import DiagnoserFailed, DiagnoserUnavailable  # noqa: E402
from diageval.diagnosers.llm import LLMDiagnoser, build_prompt, bundle_digest, prompt_sha256  # noqa: E402
from diageval.hosting.registry import resolve_diagnoser  # noqa: E402

GOOD = json.dumps({"findings": [{"category": "compute.straggler_rank", "kind": "cause", "confidence": 0.7, "ranks": [1]}]})


@pytest.fixture
def bundle(tmp_path):
    return EvidenceBundle.open(build_bundle(tmp_path / "b"))


def _configure(monkeypatch, server, retries="2"):
    monkeypatch.setenv("LLM_DIAGNOSER_BASE_URL", server.base_url)
    monkeypatch.setenv("LLM_DIAGNOSER_MODEL", "test-model")
    monkeypatch.setenv("LLM_DIAGNOSER_MAX_RETRIES", retries)


def test_unavailable_until_an_endpoint_is_configured(monkeypatch):
    monkeypatch.delenv("LLM_DIAGNOSER_BASE_URL", raising=False)
    monkeypatch.delenv("LLM_DIAGNOSER_MODEL", raising=False)
    with pytest.raises(DiagnoserUnavailable, match="LLM_DIAGNOSER_BASE_URL"):
        LLMDiagnoser()


def test_declares_network_and_prompt_hash_in_version():
    resolved = resolve_diagnoser("llm")
    assert resolved.needs_network is True
    assert f"prompt-{prompt_sha256()[:12]}" in resolved.version
    assert "comm.collective_hang" in resolved.claims and not any(c.startswith("symptom.") for c in resolved.claims)


def test_a_valid_reply_becomes_the_diagnosis(monkeypatch, bundle):
    with FakeChatServer([f"```json\n{GOOD}\n```"]) as server:
        _configure(monkeypatch, server)
        diagnosis = LLMDiagnoser().diagnose(bundle)
    assert [(f.category, f.ranks) for f in diagnosis.causes] == [("compute.straggler_rank", [1])]
    sent = server.requests[0]["body"]
    assert sent["model"] == "test-model" and sent["temperature"] == 0
    prompt = sent["messages"][0]["content"]
    assert "comm.collective_hang" in prompt and "per profiled step" in prompt and "steps.jsonl" in prompt


def test_a_malformed_reply_is_invalid_output(monkeypatch, bundle):
    with FakeChatServer(['{"findings": [{"category": "x", "confidence": 3}]}']) as server:
        _configure(monkeypatch, server)
        with pytest.raises(DiagnoserFailed) as err:
            LLMDiagnoser().diagnose(bundle)
    assert err.value.status == "invalid_output" and "confidence" in str(err.value)


def test_rate_limits_and_server_errors_are_retried(monkeypatch, bundle):
    with FakeChatServer([429, 503, GOOD]) as server:
        _configure(monkeypatch, server, retries="2")
        diagnosis = LLMDiagnoser().diagnose(bundle)
    assert len(server.requests) == 3 and diagnosis.causes


def test_giving_up_after_the_retries_is_an_llm_error(monkeypatch, bundle):
    with FakeChatServer([429, 429, 429]) as server:
        _configure(monkeypatch, server, retries="1")
        with pytest.raises(DiagnoserFailed) as err:
            LLMDiagnoser().diagnose(bundle)
    assert err.value.status == "llm_error" and len(server.requests) == 2


def test_the_digest_fits_the_token_budget(tmp_path):
    bundle = EvidenceBundle.open(build_bundle(tmp_path / "big", n_steps=200))
    full = bundle_digest(bundle, 10**9)
    small = bundle_digest(bundle, 3000)
    assert len(small) <= 3000 + 60 and len(full) > 3000
    assert "left out for the token budget" in small or "cut at the token budget" in small
    assert len(build_prompt(bundle, 4000)) <= 4 * 4000 + 60


def test_the_worker_records_an_unreadable_reply_as_invalid_output(tmp_path, bundle, monkeypatch):
    from diageval.hosting.worker_process import _diagnose

    monkeypatch.chdir(tmp_path)  # the worker moves into the case folder; put the test's cwd back afterwards

    class Unreadable:
        name, version = "t", "0"

        def diagnose(self, b):
            raise DiagnoserFailed("invalid_output", "llm reply: not valid JSON at line 1, column 1")

    class Broken(Unreadable):
        def diagnose(self, b):
            raise DiagnoserFailed("llm_error", "connection refused")

    request = {"bundle": str(bundle.root), "dir": str(tmp_path)}
    assert _diagnose(Unreadable(), request)["status"] == "invalid_output"
    assert _diagnose(Broken(), request)["status"] == "diagnoser_error"


def test_a_real_run_reaches_the_endpoint_from_inside_the_box(monkeypatch, tmp_path):
    """The whole path a user takes (`diageval diagnose llm BUNDLE --allow-network`): the diagnoser is
    constructed in the box, reads the taxonomy there (the corpus folder is hidden), gets its settings
    (the box drops the harness's own DIAGEVAL_* variables, not the diagnoser's) and reaches a loopback
    endpoint; its reply becomes the diagnosis."""
    from diageval.hosting import HostPolicy
    from diageval.run.single import diagnose_bundle

    bundle_dir = build_bundle(tmp_path / "b")
    monkeypatch.setenv("DIAGEVAL_HOME", str(tmp_path / "home"))
    with FakeChatServer([GOOD]) as server:
        _configure(monkeypatch, server)
        attempt = diagnose_bundle("llm", bundle_dir, HostPolicy(timeout_s=60, allow_network=True))
    assert attempt.status == "ok", attempt.error
    assert [(f.category, f.ranks) for f in attempt.diagnosis.causes] == [("compute.straggler_rank", [1])]
    prompt = server.requests[0]["body"]["messages"][0]["content"]
    assert "compute.straggler_rank" in prompt and "comm.collective_hang" in prompt  # the taxonomy reached the box


def test_a_real_run_without_network_is_refused(monkeypatch, tmp_path):
    from diageval.hosting.registry import DiagnoserSpecError
    from diageval.hosting import HostPolicy
    from diageval.run.single import diagnose_bundle

    bundle_dir = build_bundle(tmp_path / "b")
    with FakeChatServer([GOOD]) as server:
        _configure(monkeypatch, server)
        with pytest.raises(DiagnoserSpecError, match="--allow-network"):
            diagnose_bundle("llm", bundle_dir, HostPolicy(timeout_s=60))
        assert server.requests == []
