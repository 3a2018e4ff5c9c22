"""Score one hand-made diagnosis against one case of the corpus (``diageval score --case --diagnosis``)."""

from __future__ import annotations

from pathlib import Path

from diageval.case import load_case_set
from diageval.scoring.diagnosis_file import load_diagnosis_file
from diageval.scoring.results import CaseResult
from diageval.scoring.verdicts import score_case


def score_diagnosis_file(case_id: str, diagnosis_path: Path, cases_dir: Path | None = None) -> CaseResult:
    """Load case ``case_id`` from the corpus at ``cases_dir`` and score the diagnosis in ``diagnosis_path``.

    Raises ``KeyError`` (with close matches) for an unknown case, :class:`CaseLoadError` for a corpus with
    bad cases and :class:`DiagnosisFileError` for a bad diagnosis file. No measured impact or timing is
    known here (nothing was recorded or run), so impact error and seconds stay empty.
    """
    case_set = load_case_set(cases_dir)
    case = case_set.get(case_id).case
    diagnosis = load_diagnosis_file(diagnosis_path)
    return score_case(case, diagnosis, taxonomy=case_set.taxonomy)
