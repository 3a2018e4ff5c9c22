"""Read a diagnosis JSON file a person hands to ``diageval score --diagnosis``, with errors that name the
file, the field and what was expected."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from diageval.diagnosis import Diagnosis


class DiagnosisFileError(Exception):
    """A diagnosis file that cannot be read, is not JSON, or does not match the schema."""


def _field(loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out or "<top level>"


def load_diagnosis_file(path: Path) -> Diagnosis:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DiagnosisFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DiagnosisFileError(f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    try:
        return Diagnosis.model_validate(data)
    except ValidationError as err:
        lines = []
        for e in err.errors(include_url=False):
            msg = "unknown field" if e["type"] == "extra_forbidden" else e["msg"].removeprefix("Value error, ")
            got = "" if e["type"] in ("missing", "extra_forbidden") else f" (got {e.get('input')!r})"
            lines.append(f"{path}: {_field(e['loc'])}: {msg}{got}")
        raise DiagnosisFileError(
            "\n".join(lines) + "\n(expected a diagnosis; `diageval schema diagnosis` prints its JSON Schema)"
        ) from None
