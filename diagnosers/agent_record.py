"""What an agent spent on one case and what it did: the format of ``trajectory.json`` (one file per case).

An agent diagnoser writes it in its working folder (:data:`~diageval.diagnosers.base.TRAJECTORY_NAME`), after
every turn, so a case the harness kills still leaves what happened up to then; the harness copies it into the
run folder beside the case's diagnosis (``runs/<run>/cases/<id>/trajectory.json``), and
``RunStore.read_trajectory`` reads it back through :class:`AgentRecord`. Any diagnoser, a ``cmd:`` agent too,
may write one in this format; a file that does not fit it is reported as such, never trusted.

Format (``format: "diageval-trajectory/1"``)::

    {"format": "diageval-trajectory/1",
     "model": "the model name the endpoint served",
     "caps": {"turns": 20, "tokens": 200000, "dollars": 1.0 | null, "seconds": 240.0},
     "prices": {"prompt": 3.0, "completion": 15.0, "cached": 0.3} | null,     # USD per million tokens
     "usage": {"prompt_tokens": ..., "completion_tokens": ..., "cached_tokens": ...,
               "dollars": 0.0123 | null,                                      # null without a price
               "turns": 3, "tool_calls": 5, "seconds": 12.5, "estimated": false},
     "ended": "answered" | "cap_hit" | "invalid_output" | "error" | "running",
     "cap": "turns" | "tokens" | "dollars" | "seconds" | null,                # which cap, when one ended it
     "detail": "one line, or null",
     "turns": [{"turn": 1, "content": "what the model said (shortened)",
                "prompt_tokens": ..., "completion_tokens": ..., "cached_tokens": ..., "seconds": ...,
                "tool_calls": [{"name": "trace_summary", "arguments": "{\\"rank\\": 1}",
                                "result": "shortened text", "is_error": false, "seconds": 0.4}]}]}

``prompt_tokens`` counts every prompt token the endpoint billed, the cached ones among them (``cached_tokens``,
the endpoint's ``prompt_tokens_details.cached_tokens``); dollars are ``(prompt - cached) * prompt price + cached *
cached price + completion * completion price``, per million tokens. Texts are cut at :data:`SHORT_CHARS` with the
cut said.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

FORMAT = "diageval-trajectory/1"
SHORT_CHARS = 2_000
MAX_TURNS_KEPT = 500

CapName = Literal["turns", "tokens", "dollars", "seconds"]
Ended = Literal["answered", "cap_hit", "invalid_output", "error", "running"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Prices(_Strict):
    """USD per million tokens."""

    prompt: float = Field(ge=0)
    completion: float = Field(ge=0)
    cached: float | None = Field(None, ge=0, description="cached prompt tokens; null: billed as prompt tokens")

    def dollars(self, prompt: int, completion: int, cached: int) -> float:
        cached_price = self.prompt if self.cached is None else self.cached
        return ((prompt - cached) * self.prompt + cached * cached_price + completion * self.completion) / 1e6


class Caps(_Strict):
    turns: int = Field(ge=1)
    tokens: int = Field(ge=1, description="prompt + completion tokens over the whole case")
    dollars: float | None = Field(None, gt=0)
    seconds: float = Field(gt=0)


class Usage(_Strict):
    prompt_tokens: int = Field(0, ge=0)
    completion_tokens: int = Field(0, ge=0)
    cached_tokens: int = Field(0, ge=0)
    dollars: float | None = None
    turns: int = Field(0, ge=0)
    tool_calls: int = Field(0, ge=0)
    seconds: float = Field(0.0, ge=0)
    estimated: bool = Field(False, description="the endpoint sent no usage: tokens estimated at 4 characters a token")

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ToolCall(_Strict):
    name: str = Field(max_length=200)
    arguments: str = Field(max_length=SHORT_CHARS + 100)
    result: str = Field(max_length=SHORT_CHARS + 100)
    is_error: bool = False
    seconds: float = Field(0.0, ge=0)


class Turn(_Strict):
    turn: int = Field(ge=1)
    content: str = Field("", max_length=SHORT_CHARS + 100)
    prompt_tokens: int = Field(0, ge=0)
    completion_tokens: int = Field(0, ge=0)
    cached_tokens: int = Field(0, ge=0)
    seconds: float = Field(0.0, ge=0)
    tool_calls: list[ToolCall] = Field(default_factory=list)


class AgentRecord(_Strict):
    """One case's ``trajectory.json`` (see the module docstring)."""

    format: Literal["diageval-trajectory/1"] = FORMAT
    model: str = Field(max_length=200)
    caps: Caps
    prices: Prices | None = None
    usage: Usage = Field(default_factory=Usage)
    ended: Ended = "running"
    cap: CapName | None = None
    detail: str | None = Field(None, max_length=SHORT_CHARS + 100)
    turns: list[Turn] = Field(default_factory=list, max_length=MAX_TURNS_KEPT)


def short(text: str, limit: int = SHORT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, the cut said."""
    return text if len(text) <= limit else text[:limit] + f"...[{len(text) - limit} characters cut]"
