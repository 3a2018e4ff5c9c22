"""``agent``: a chat model that investigates a bundle with tools, over MCP, inside the diagnoser's box, until it can
answer with a diagnosis, within caps on its turns, tokens, dollars and time.

Configuration (environment; the diagnoser is constructed with no arguments; with ``--allow-network`` the box passes
every ``AGENT_DIAGNOSER_*`` variable, and nothing else of the user's unless named with ``--pass-env``):

* ``AGENT_DIAGNOSER_BASE_URL`` the OpenAI-compatible endpoint (required), ``AGENT_DIAGNOSER_MODEL`` the model
  (required), ``AGENT_DIAGNOSER_API_KEY`` its key (else ``OPENAI_API_KEY``, which reaches the box only when the run
  says ``--pass-env OPENAI_API_KEY``; a local server may need none);
* caps per case: ``AGENT_DIAGNOSER_MAX_TURNS`` (default 20 model calls), ``AGENT_DIAGNOSER_MAX_TOKENS`` (prompt +
  completion over the case, default 200000), ``AGENT_DIAGNOSER_MAX_DOLLARS`` (no default; needs a price),
  ``AGENT_DIAGNOSER_MAX_SECONDS`` (default 240: under the run's ``--timeout`` of 300 s, so a slow case ends as a
  cap of its own, with its trajectory, before the harness kills the worker);
* ``AGENT_DIAGNOSER_PRICES``: the price table, JSON ``{"MODEL": {"prompt": USD, "completion": USD, "cached": USD}}``
  per million tokens (``cached`` optional). Without a price for the model, dollars are not counted (null).

How a case goes: the diagnoser starts the tool server (``python -m diageval.diagnosers.agent_mcp BUNDLE``, a child
process inside the same box, on the box's private bundle copy; its environment carries no key), lists its tools and
hands them to the model as functions. Each turn is one chat completion (temperature 0); the tool calls it asks for
are run over MCP and their results (cut to ``agent_tools.MAX_RESULT_CHARS``) go back as tool messages. A reply
without tool calls is the answer: it goes through the one diagnosis reader (a Markdown fence removed), and one
that is not a valid diagnosis is ``invalid_output``. On the last allowed turn the model is told so and offered no
tools (``tool_choice: none``); a last turn that still asks for tools ends the case at the turn cap, its calls not run.

Caps: before each turn, the turns, tokens and dollars spent are checked against their caps, and the token cap
bounds the turn's completion (``max_tokens``); the wall-time cap is a deadline over the whole case (the model's
calls and the tools' included), which cancels whatever is running when it passes. A cap hit raises
``DiagnoserFailed("cap_hit", ...)``: the case's status is ``cap_hit``, scored as an abstention and counted apart.
A token or dollar cap can be overshot by one turn's prompt: a prompt is billed before anyone can refuse it.
Usage is the endpoint's (``usage``; cached prompt tokens from ``prompt_tokens_details``); an endpoint that sends no
usage has it estimated at 4 characters a token, and the record says ``estimated``.

Record: after every turn the diagnoser writes ``trajectory.json`` in its working folder (format:
:mod:`diageval.diagnosers.agent_record`), which the harness keeps in the run folder. Version: the model, the caps,
and the sha256 of the prompt and of the tool modules, so a run with another model, prompt, tool set or cap is
another row.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.agent_record import AgentRecord, CapName, Caps, Prices, ToolCall, Turn, short
from diageval.diagnosers.base import TRAJECTORY_NAME, DiagnoserFailed, DiagnoserUnavailable, require_module
from diageval.diagnosers.llm import CHARS_PER_TOKEN, _taxonomy_causes, chat_endpoint, strip_code_fence, taxonomy_text
from diageval.diagnosis import Diagnosis, DiagnosisParseError, parse_diagnosis_json

ENV = "AGENT_DIAGNOSER_"
PROMPT_PATH = Path(__file__).with_name("agent_prompt.txt")
TOOL_MODULES = ("agent_tools.py", "agent_mcp.py")
SERVER_MODULE = "diageval.diagnosers.agent_mcp"
INSTALL_HINT = "pip install 'diageval[agent]' and set AGENT_DIAGNOSER_BASE_URL and AGENT_DIAGNOSER_MODEL"
DEFAULT_CAPS = {"turns": 20, "tokens": 200_000, "seconds": 240.0}
MAX_COMPLETION_TOKENS = 4096  # one turn's answer: a diagnosis or a few tool calls
MAX_CALLS_PER_TURN = 16  # beyond it a call is answered "not run" (the record stays bounded: 500 turns x 16 calls)
SERVER_ENV = ("PATH", "PYTHONPATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PYTHONHASHSEED")  # the tool server's, no key


def sources_sha256() -> str:
    h = hashlib.sha256(PROMPT_PATH.read_bytes())
    for name in TOOL_MODULES:
        h.update(Path(__file__).with_name(name).read_bytes())
    return h.hexdigest()


def read_caps(environ: dict[str, str] | os._Environ = os.environ) -> Caps:
    """The caps the environment sets (defaults: :data:`DEFAULT_CAPS`); a bad value is DiagnoserUnavailable."""
    values: dict[str, Any] = dict(DEFAULT_CAPS)
    for name, kind in (("turns", int), ("tokens", int), ("dollars", float), ("seconds", float)):
        raw = environ.get(f"{ENV}MAX_{name.upper()}")
        if raw:
            try:
                values[name] = kind(raw)
            except ValueError:
                raise DiagnoserUnavailable(f"{ENV}MAX_{name.upper()}={raw!r}: expected a number") from None
    try:
        return Caps.model_validate(values)
    except ValueError as exc:
        raise DiagnoserUnavailable(f"{ENV}MAX_*: {exc}") from None


def read_prices(model: str, environ: dict[str, str] | os._Environ = os.environ) -> Prices | None:
    """The model's row of ``AGENT_DIAGNOSER_PRICES`` (None when the table or the row is absent)."""
    raw = environ.get(f"{ENV}PRICES")
    if not raw:
        return None
    try:
        table = json.loads(raw)
        row = table.get(model) if isinstance(table, dict) else None
        return None if row is None else Prices.model_validate(row)
    except ValueError as exc:
        raise DiagnoserUnavailable(f"{ENV}PRICES: expected JSON {{\"MODEL\": {{\"prompt\": USD, \"completion\": USD, "
                                   f"\"cached\": USD}}}} per million tokens: {str(exc)[:300]}") from None


def _caps_words() -> str:
    """The caps in the version (``caps-turns20-tokens200000-seconds240.0``), or why they cannot be read."""
    try:
        return "caps-" + "-".join(f"{k}{v}" for k, v in read_caps().model_dump().items() if v is not None)
    except DiagnoserUnavailable:
        return "caps-unreadable"


class _CapHit(Exception):
    def __init__(self, cap: CapName, detail: str):
        self.cap, self.detail = cap, detail
        super().__init__(f"{cap} cap: {detail}")


class AgentDiagnoser:
    """A tool-using chat model (see the module docstring)."""

    name = "agent"
    version = f"1+{os.environ.get(ENV + 'MODEL', 'unconfigured')}+prompt-tools-{sources_sha256()[:12]}+{_caps_words()}"
    claims: ClassVar[tuple[str, ...]] = _taxonomy_causes()
    needs_network: ClassVar[bool] = True

    def __init__(self) -> None:
        require_module("mcp", self.name, "the mcp package", INSTALL_HINT)
        openai = require_module("openai", self.name, "the openai client", INSTALL_HINT)
        base_url, model, api_key = chat_endpoint(ENV, INSTALL_HINT)
        self.model = model
        self.caps = read_caps()
        self.prices = read_prices(model)
        if self.caps.dollars is not None and self.prices is None:
            raise DiagnoserUnavailable(f"{ENV}MAX_DOLLARS needs the price of {model!r} in {ENV}PRICES")
        self.client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key,
            max_retries=int(os.environ.get(ENV + "MAX_RETRIES", "2")), timeout=self.caps.seconds)

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        import anyio

        record = AgentRecord(model=self.model, caps=self.caps, prices=self.prices)
        out = Path.cwd() / TRAJECTORY_NAME
        started = time.monotonic()
        _write(out, record)  # "running": what a case the harness kills (its --timeout) keeps at least
        try:
            try:
                return anyio.run(self._investigate, bundle, record, out, started)
            except BaseExceptionGroup as group:  # the MCP client's task group wraps what the conversation raised
                raise _leaf(group) from None
        except _CapHit as hit:
            record.ended, record.cap, record.detail = "cap_hit", hit.cap, short(str(hit))
            raise DiagnoserFailed("cap_hit", str(hit)) from None
        except DiagnoserFailed as exc:
            record.ended = "invalid_output" if exc.status == "invalid_output" else "error"
            record.detail = short(f"{exc.status}: {exc}")
            raise
        except Exception as exc:
            record.ended, record.detail = "error", short(f"{type(exc).__name__}: {exc}")
            raise DiagnoserFailed("agent_error", f"{type(exc).__name__}: {exc}") from exc
        finally:
            record.usage.seconds = round(time.monotonic() - started, 3)
            _write(out, record)

    async def _investigate(self, bundle: EvidenceBundle, record: AgentRecord, out: Path, started: float) -> Diagnosis:
        import anyio
        from mcp import ClientSession, StdioServerParameters, stdio_client

        deadline = started + self.caps.seconds
        server = StdioServerParameters(command=sys.executable, args=["-m", SERVER_MODULE, str(bundle.root)],
                                       env={k: os.environ[k] for k in SERVER_ENV if k in os.environ})
        with anyio.move_on_after(max(0.0, deadline - time.monotonic())) as scope:
            async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                listed = await session.list_tools()
                tools = [{"type": "function", "function": {"name": t.name, "description": (t.description or "")[:1000],
                                                           "parameters": t.input_schema}} for t in listed.tools]
                return await self._converse(session, tools, record, out, started)
        assert scope.cancelled_caught
        raise _CapHit("seconds", f"{time.monotonic() - started:.1f} s of {self.caps.seconds:g} s, "
                                 f"after {record.usage.turns} turn(s)")

    async def _converse(self, session: Any, tools: list[dict[str, Any]], record: AgentRecord, out: Path,
                        started: float) -> Diagnosis:
        import openai

        messages: list[dict[str, Any]] = [{"role": "system", "content": self._prompt()},
                                          {"role": "user", "content": "Diagnose this bundle. Start with `overview`."}]
        usage, caps = record.usage, self.caps
        while True:
            self._check(record)
            last = usage.turns + 1 == caps.turns
            if last:
                messages.append({"role": "user", "content": "This is your last turn: answer now with the JSON diagnosis."})
            turn_start = time.monotonic()
            try:
                reply = await self.client.chat.completions.create(
                    model=self.model, temperature=0, messages=messages, tools=tools,
                    tool_choice="none" if last else "auto",
                    max_tokens=max(1, min(MAX_COMPLETION_TOKENS, caps.tokens - usage.tokens)))
            except openai.OpenAIError as exc:
                raise DiagnoserFailed("llm_error", f"{type(exc).__name__}: {exc}") from exc
            message = reply.choices[0].message if reply.choices else None
            turn = self._account(record, reply, messages, message, time.monotonic() - turn_start)
            calls = list(message.tool_calls or []) if message is not None else []
            if not calls:
                _write(out, record)
                text = (message.content or "") if message is not None else ""
                try:
                    diagnosis = parse_diagnosis_json(strip_code_fence(text), "agent answer")
                except DiagnosisParseError as exc:
                    raise DiagnoserFailed("invalid_output", str(exc)) from exc
                record.ended = "answered"
                return diagnosis
            if last:  # told to answer, offered no tool, and still asking for one: the turns are spent
                _write(out, record)
                raise _CapHit("turns", f"{usage.turns} model turns of {caps.turns} without an answer "
                                       f"(the last asked for {len(calls)} more tool call(s))")
            messages.append({"role": "assistant", "content": message.content or "",
                             "tool_calls": [{"id": c.id, "type": "function",
                                             "function": {"name": c.function.name, "arguments": c.function.arguments}}
                                            for c in calls]})
            for i, call in enumerate(calls):
                text = (await self._call_tool(session, call, turn) if i < MAX_CALLS_PER_TURN else
                        f"not run: at most {MAX_CALLS_PER_TURN} tool calls a turn")
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
            usage.tool_calls += min(len(calls), MAX_CALLS_PER_TURN)
            _write(out, record)

    async def _call_tool(self, session: Any, call: Any, turn: Turn) -> str:
        start = time.monotonic()
        raw = call.function.arguments or "{}"
        try:
            arguments = json.loads(raw)
            if not isinstance(arguments, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            text, is_error = f"the arguments are not a JSON object: {exc}", True
        else:
            try:
                result = await session.call_tool(call.function.name, arguments)
            except Exception as exc:  # a protocol error (an unknown tool...): the model reads it, the case goes on
                text, is_error = f"tool error: {type(exc).__name__}: {str(exc)[:500]}", True
            else:
                text = "\n".join(getattr(c, "text", "") or "" for c in result.content)
                is_error = bool(result.is_error)
        turn.tool_calls.append(ToolCall(name=short(call.function.name, 200), arguments=short(raw), result=short(text),
                                        is_error=is_error, seconds=round(time.monotonic() - start, 3)))
        return text

    def _check(self, record: AgentRecord) -> None:
        """Raise :class:`_CapHit` when a cap on turns, tokens or dollars is spent."""
        u, caps = record.usage, self.caps
        if u.turns >= caps.turns:
            raise _CapHit("turns", f"{u.turns} model turns of {caps.turns} without an answer")
        if u.tokens >= caps.tokens:
            raise _CapHit("tokens", f"{u.tokens} tokens of {caps.tokens} after {u.turns} turn(s)")
        if caps.dollars is not None and (u.dollars or 0.0) >= caps.dollars:
            raise _CapHit("dollars", f"${u.dollars:.4f} of ${caps.dollars:g} after {u.turns} turn(s)")

    def _account(self, record: AgentRecord, reply: Any, messages: list[dict[str, Any]], message: Any,
                 seconds: float) -> Turn:
        """Add one reply's usage to the record (estimated when the endpoint sends none); return its turn."""
        u = record.usage
        got = getattr(reply, "usage", None)
        if got is not None:
            prompt, completion = int(got.prompt_tokens or 0), int(got.completion_tokens or 0)
            details = getattr(got, "prompt_tokens_details", None)
            cached = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
        else:
            said = "" if message is None else (message.content or "") + json.dumps(
                [c.function.arguments for c in message.tool_calls or []])
            prompt = math.ceil(len(json.dumps(messages)) / CHARS_PER_TOKEN)
            completion, cached = math.ceil(len(said) / CHARS_PER_TOKEN), 0
            u.estimated = True
        cached = min(cached, prompt)
        u.prompt_tokens += prompt
        u.completion_tokens += completion
        u.cached_tokens += cached
        u.turns += 1
        if record.prices is not None:
            u.dollars = round((u.dollars or 0.0) + record.prices.dollars(prompt, completion, cached), 6)
        turn = Turn(turn=u.turns, content=short((message.content or "") if message is not None else ""),
                    prompt_tokens=prompt, completion_tokens=completion, cached_tokens=cached, seconds=round(seconds, 3))
        if len(record.turns) < 500:
            record.turns.append(turn)
        return turn

    def _prompt(self) -> str:
        return (PROMPT_PATH.read_text(encoding="utf-8").replace("{taxonomy}", taxonomy_text())
                .replace("{schema}", json.dumps(Diagnosis.model_json_schema())).replace("{turns}", str(self.caps.turns)))


def _leaf(group: BaseExceptionGroup) -> BaseException:
    """The one exception a task group wrapped (the first, when several were)."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _write(path: Path, record: AgentRecord) -> None:
    """Write the record whole or not at all (a case killed mid-write keeps the previous turn's)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(record.model_dump_json(indent=1), encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:  # a full output folder must not hide the case's own outcome
        print(f"agent: cannot write {path.name}: {exc}", file=sys.stderr)
