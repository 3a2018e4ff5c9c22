"""The ``symptoms`` baseline: names what it sees as the cause (the misleading baseline of the design).

It measures the same symptoms the rules diagnoser observes (long collectives, low utilisation, slow or
spiky steps; ``rules.observed``) and claims each as a cause with its ``symptom.*`` category. A
diagnoser that cannot tell a symptom from its cause scores like this; the real ones must beat it.
It never abstains: it has no notion of evidence being insufficient.
"""

from __future__ import annotations

from typing import ClassVar

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.rules.inputs import gather_evidence
from diageval.diagnosers.rules.observed import observe_symptoms
from diageval.diagnosis import Diagnosis


class SymptomsDiagnoser:
    name: ClassVar[str] = "symptoms"
    version: ClassVar[str] = "0.1.0"

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        return Diagnosis(findings=observe_symptoms(gather_evidence(bundle), kind="cause"))
