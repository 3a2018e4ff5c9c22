"""Read a diagnosis JSON file a person hands to ``diageval score --diagnosis``, with errors that name the
file, the field and what was expected (parsing itself is :func:`diageval.diagnosis.parse_diagnosis_json`)."""

from __future__ import annotations

from pathlib import Path

from diageval.diagnosis import Diagnosis, DiagnosisParseError, parse_diagnosis_json

DiagnosisFileError = DiagnosisParseError


def load_diagnosis_file(path: Path) -> Diagnosis:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DiagnosisFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_diagnosis_json(text, str(path))
