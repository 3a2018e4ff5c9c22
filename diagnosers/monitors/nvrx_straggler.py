"""``nvrx-straggler``: NVIDIA's straggler detection (``nvidia-resiliency-ext``) run inside the job, judged
from the reports it made there (``monitor/nvrx-reports.jsonl``, one per :data:`REPORT_EVERY` steps, written
by rank 0; ``diageval.recording.monitors.nvrx`` says how they are made).

Each report holds, per section (``forward``, ``step``) and rank, the tool's relative score (the fastest
rank's median time over this rank's: 0.5 = twice as slow as the fastest) and individual score (the rank's
best window so far over this window), and the ranks its ``identify_stragglers`` flags at its default
threshold 0.75. On a GPU the reports also carry GPU scores from CUPTI kernel times.

Mapping (what the reports say -> taxonomy):

=====================================================================  =====================================
what the reports say                                                   finding
=====================================================================  =====================================
ranks flagged by relative score (any section, or GPU) in some reports  ``compute.straggler_rank``, cause,
                                                                       per rank; confidence = the fraction
                                                                       of reports that flag it; steps = the
                                                                       first to the last flagged window
ranks flagged by individual score in the ``step`` section, in some     ``symptom.slow_step``, symptom,
reports after the first (the first has no earlier window)              confidence = that fraction
=====================================================================  =====================================

Confidence is the tool's own consistency: a rank flagged in one window of six is a hedge (0.17), one flagged
from its onset on is a claim. Never claims: any cause but ``compute.straggler_rank`` (nvrx ranks ranks; it
does not say why a rank is slow). No report (a job shorter than a report window that also failed): abstain.
"""

from __future__ import annotations

from typing import ClassVar

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.base import DiagnoserUnavailable, installed_version
from diageval.diagnosers.monitors.raw import monitor_folder, read_jsonl
from diageval.diagnosis import Abstention, Diagnosis, Finding

DISTRIBUTION = "nvidia-resiliency-ext"
INSTALL_HINT = "pip install 'diageval[nvrx]'"
REPORTS_FILE = "nvrx-reports.jsonl"  # as diageval.recording.monitors.nvrx writes it (a test checks)


class NvrxStragglerDiagnoser:
    """nvidia-resiliency-ext's straggler reports, made inside the job (see the module docstring)."""

    name = "nvrx-straggler"
    version = f"1+nvidia-resiliency-ext-{installed_version(DISTRIBUTION)}"
    claims: ClassVar[tuple[str, ...]] = ("compute.straggler_rank",)

    def __init__(self) -> None:
        if installed_version(DISTRIBUTION) == "missing":
            raise DiagnoserUnavailable(f"nvrx-straggler needs {DISTRIBUTION}; install it with: {INSTALL_HINT}")

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        path = monitor_folder(bundle) / REPORTS_FILE
        reports = read_jsonl(path) if path.is_file() else []
        if not reports:
            return Diagnosis(abstain=Abstention(reason="the straggler detector made no report during the job"))
        return Diagnosis(findings=findings_from_reports(reports))


def findings_from_reports(reports: list[dict]) -> list[Finding]:
    """The findings of the module docstring's table, from the reports in job order."""
    n = len(reports)
    relative: dict[int, list[tuple[int, int]]] = {}
    individual: dict[int, list[tuple[int, int]]] = {}
    for i, rep in enumerate(reports):
        window = (int(rep["steps"][0]), int(rep["steps"][1]))
        flagged = {int(r) for ranks in rep.get("straggler_sections_relative", {}).values() for r in ranks}
        flagged |= {int(r) for r in rep.get("straggler_gpus_relative", [])}
        for r in flagged:
            relative.setdefault(r, []).append(window)
        if i > 0:
            for r in rep.get("straggler_sections_individual", {}).get("step", []):
                individual.setdefault(int(r), []).append(window)
    findings = []
    for rank, windows in sorted(relative.items()):
        findings.append(Finding(
            category="compute.straggler_rank", kind="cause", confidence=round(len(windows) / n, 3), ranks=[rank],
            steps=(windows[0][0], windows[-1][1]),
            summary=f"nvrx flags rank {rank} as a straggler (relative score < 0.75) in {len(windows)} of {n} reports",
            evidence=[f"monitor/{REPORTS_FILE}: steps {a}-{b - 1}" for a, b in windows][:6]))
    if individual and n > 1:
        ranks = sorted(individual)
        windows = sorted({w for ws in individual.values() for w in ws})
        findings.append(Finding(
            category="symptom.slow_step", kind="symptom", confidence=round(len(windows) / (n - 1), 3), ranks=ranks,
            steps=(windows[0][0], windows[-1][1]),
            summary=f"nvrx: step time of ranks {ranks} below 0.75 of their own best window in {len(windows)} of {n - 1} reports",
            evidence=[f"monitor/{REPORTS_FILE}: steps {a}-{b - 1}" for a, b in windows][:6]))
    return findings
