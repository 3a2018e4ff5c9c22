"""``llm``: any model behind an OpenAI-compatible chat endpoint, asked for a diagnosis of a bundle's digest.

Configuration (environment; the diagnoser is constructed with no arguments):

* ``LLM_DIAGNOSER_BASE_URL``  the endpoint, e.g. ``http://127.0.0.1:8000/v1`` (required);
* ``LLM_DIAGNOSER_MODEL``     the model name the endpoint serves (required);
* ``LLM_DIAGNOSER_API_KEY``   its key (else ``OPENAI_API_KEY``; a local server may need none);
* ``LLM_DIAGNOSER_MAX_PROMPT_TOKENS`` the prompt budget (default 12000), ``LLM_DIAGNOSER_MAX_RETRIES``
  (default 4), ``LLM_DIAGNOSER_TIMEOUT_S`` (default 120).

Until the base URL and the model are set it is listed as unavailable. It talks to a service:
``needs_network = True``; the harness must run it only when the run allows network access.

The prompt is one versioned template file, ``llm_prompt.txt`` beside this module: the taxonomy with
definitions, the diagnosis JSON schema, and the digest. Its sha256 (first 12 hex digits) and the model
name are part of ``version``, which ``run.json`` records: editing the prompt or changing the model is a
new diagnoser version, and a resumed run refuses to mix them.

The digest (:func:`bundle_digest`): the environment, per rank the per-step table of the trace reader
(``trace_summary``: step time, data wait, collective time, host busy, unexplained, ops, device busy),
the per-rank step times of ``steps.jsonl``, and the last lines of each rank's log. Token budget: tokens
are estimated as characters / 4 (the usual rule for English and JSON with BPE tokenisers); when the
prompt is over budget, log tails are cut first, then the rows of the per-step tables (evenly thinned,
first and last kept), and the digest says what was cut.

The reply goes through the one diagnosis reader (``parse_diagnosis_json``), after removing a Markdown
code fence if the model wrapped its JSON in one. A reply that is not a valid diagnosis is
``invalid_output``. Rate limits (429), server errors and dropped connections are retried by the
``openai`` client with exponential backoff (honouring ``Retry-After``); still failing after
``max_retries`` is ``DiagnoserFailed("llm_error")``. Temperature 0.

Claims: any cause of the taxonomy (``claims`` = every cause id at import time).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
from collections import defaultdict
from pathlib import Path
from typing import ClassVar

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.base import DiagnoserFailed, DiagnoserUnavailable, require_module
from diageval.diagnosis import Diagnosis, DiagnosisParseError, parse_diagnosis_json

PROMPT_PATH = Path(__file__).with_name("llm_prompt.txt")
INSTALL_HINT = "pip install 'diageval[llm]' and set LLM_DIAGNOSER_BASE_URL and LLM_DIAGNOSER_MODEL"
CHARS_PER_TOKEN = 4
LOG_TAIL_LINES = 12
ENV = "LLM_DIAGNOSER_"


def chat_endpoint(env: str, install_hint: str) -> tuple[str, str, str]:
    """The endpoint a chat diagnoser's environment names: ``<env>BASE_URL``, ``<env>MODEL`` and the key
    (``<env>API_KEY``, else ``OPENAI_API_KEY``, else "none": a local server may need none). The diagnoser is
    unavailable until the URL and the model are set."""
    base_url, model = os.environ.get(env + "BASE_URL"), os.environ.get(env + "MODEL")
    if not base_url or not model:
        raise DiagnoserUnavailable(f"no endpoint configured; {install_hint}")
    return base_url, model, os.environ.get(env + "API_KEY") or os.environ.get("OPENAI_API_KEY") or "none"


def prompt_sha256() -> str:
    return hashlib.sha256(PROMPT_PATH.read_bytes()).hexdigest()


def _taxonomy_causes() -> tuple[str, ...]:
    try:
        from diageval.cases.taxonomy import load_taxonomy

        return tuple(e.id for e in load_taxonomy().entries if e.kind == "cause")
    except Exception:  # no taxonomy file here: the listing then shows no claims
        return ()


class LLMDiagnoser:
    """A chat model's diagnosis of the bundle digest (see the module docstring)."""

    name = "llm"
    version = f"1+{os.environ.get(ENV + 'MODEL', 'unconfigured')}+prompt-{prompt_sha256()[:12]}"
    claims: ClassVar[tuple[str, ...]] = _taxonomy_causes()
    needs_network: ClassVar[bool] = True

    def __init__(self) -> None:
        openai = require_module("openai", self.name, "the openai client", INSTALL_HINT)
        base_url, self.model, api_key = chat_endpoint(ENV, INSTALL_HINT)
        self.max_prompt_tokens = int(os.environ.get("LLM_DIAGNOSER_MAX_PROMPT_TOKENS", "12000"))
        self.client = openai.OpenAI(
            base_url=base_url, api_key=api_key,
            max_retries=int(os.environ.get("LLM_DIAGNOSER_MAX_RETRIES", "4")),
            timeout=float(os.environ.get("LLM_DIAGNOSER_TIMEOUT_S", "120")),
        )

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        import openai

        try:
            prompt = build_prompt(bundle, self.max_prompt_tokens)
        except OSError as exc:  # the taxonomy or the template cannot be read where the diagnoser runs
            raise DiagnoserFailed("llm_error", f"cannot build the prompt: {exc}") from exc
        try:
            reply = self.client.chat.completions.create(
                model=self.model, temperature=0, messages=[{"role": "user", "content": prompt}],
            )
        except openai.OpenAIError as exc:
            raise DiagnoserFailed("llm_error", f"{type(exc).__name__}: {exc}") from exc
        text = (reply.choices[0].message.content or "") if reply.choices else ""
        try:
            return parse_diagnosis_json(strip_code_fence(text), "llm reply")
        except DiagnosisParseError as exc:
            raise DiagnoserFailed("invalid_output", str(exc)) from exc


def strip_code_fence(text: str) -> str:
    m = re.fullmatch(r"\s*```(?:json)?\s*\n(.*?)\n\s*```\s*", text, flags=re.DOTALL)
    return m.group(1) if m else text


def build_prompt(bundle: EvidenceBundle, max_tokens: int) -> str:
    from diageval.diagnosis import Diagnosis as _D

    template = PROMPT_PATH.read_text(encoding="utf-8")
    fixed = template.replace("{taxonomy}", taxonomy_text()).replace("{schema}", json.dumps(_D.model_json_schema()))
    budget_chars = max(0, max_tokens * CHARS_PER_TOKEN - len(fixed))
    return fixed.replace("{digest}", bundle_digest(bundle, budget_chars))


def taxonomy_text() -> str:
    from diageval.cases.taxonomy import load_taxonomy

    return "\n".join(f"- {e.id} ({e.kind}): {e.definition} Evidence: {e.evidence}" for e in load_taxonomy().entries)


def bundle_digest(bundle: EvidenceBundle, budget_chars: int) -> str:
    """The bundle in compact text, cut to ``budget_chars`` (log tails first, then table rows)."""
    head = [f"environment: device {bundle.env.device}, world_size {bundle.world_size}, torch {bundle.env.torch}"]
    tables = {r: _step_table(r, p) for r, p in bundle.trace_paths().items()}
    steps = _steps_text(bundle)
    logs = {r: _tail(p) for r, p in bundle.log_paths().items()}
    keep_rows, log_lines = None, LOG_TAIL_LINES
    while True:
        text = _assemble(head, tables, steps, logs, keep_rows, log_lines)
        if len(text) <= budget_chars:
            return text
        if log_lines > 0:
            log_lines = max(0, log_lines - 4)
        elif keep_rows is None or keep_rows > 2:
            keep_rows = max(2, (keep_rows or max((len(t) for t in tables.values()), default=2)) // 2)
        else:
            return text[:budget_chars] + "\n[digest cut at the token budget]"


def _assemble(head, tables, steps, logs, keep_rows, log_lines) -> str:
    out = list(head)
    for rank, rows in tables.items():
        shown = rows if keep_rows is None or len(rows) <= keep_rows else _thin(rows, keep_rows)
        out.append(f"\nrank {rank} trace, per profiled step (step, ms, data_wait, collective, host_busy, unexplained, host_ops, device_busy):")
        out += shown if isinstance(shown, list) else [shown]
        if len(shown) < len(rows):
            out.append(f"[{len(rows) - len(shown)} of {len(rows)} rows left out for the token budget]")
    out.append("\nsteps.jsonl, per rank, step times in ms:")
    out.append(steps)
    for rank, lines in logs.items():
        if log_lines:
            out.append(f"\nrank {rank} log, last {min(log_lines, len(lines))} lines:")
            out += lines[-log_lines:]
    if not log_lines and logs:
        out.append("[log tails left out for the token budget]")
    return "\n".join(out)


def _thin(rows: list[str], keep: int) -> list[str]:
    idx = sorted({round(i * (len(rows) - 1) / (keep - 1)) for i in range(keep)})
    return [rows[i] for i in idx]


def _step_table(rank: int, path: Path) -> list[str]:
    from diageval.bundle.trace_summary import summarize_trace

    try:
        s = summarize_trace(path)
    except Exception as exc:
        return [f"(trace unreadable: {type(exc).__name__})"]
    rows = [f"{st.number}, {st.dur_us / 1e3:.1f}, {st.data_wait_us / 1e3:.1f}, {st.collective_us / 1e3:.1f}, "
            f"{st.host_busy_us / 1e3:.1f}, {st.unexplained_us / 1e3:.1f}, {st.host_ops}, {st.device_busy_us / 1e3:.1f}"
            for st in s.steps]
    if s.truncated:
        rows.append(f"(trace truncated: {s.truncated})")
    return rows or ["(no ProfilerStep in the trace)"]


def _steps_text(bundle: EvidenceBundle) -> str:
    per_rank: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for s in bundle.steps():
        per_rank[s.rank].append((s.step, s.duration * 1e3))
    lines = []
    for rank, rows in sorted(per_rank.items()):
        rows.sort()
        med = statistics.median(d for _, d in rows)
        lines.append(f"rank {rank}: steps {rows[0][0]}-{rows[-1][0]}, median {med:.1f}: " + " ".join(f"{d:.0f}" for _, d in rows))
    return "\n".join(lines) or "(no steps.jsonl)"


def _tail(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        return []
