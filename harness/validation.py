"""How diageval names the field a pydantic validation error is about, in every message it prints."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def field_path(loc: Iterable[Any]) -> str:
    """A pydantic error location as a person writes it: ``faults[0].params.target_rank`` ("" for the top)."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out
