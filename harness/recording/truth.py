"""Ground truth the cache keeps beside (never inside) a bundle: who it was recorded for, and whether the
injection manifested (:class:`Verification`, computed by :mod:`diageval.recording.verify`)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, computed_field

from diageval.recording.manifest_test import ManifestTest

Difficulty = Literal["easy", "medium", "hard"]

# A case's difficulty is how far its injection's effect stands above the run-to-run noise of its healthy
# twin: z = (ratio - 1) / max(noise, NOISE_FLOOR), where ratio is the manifest metric injected/healthy and
# noise the twin's relative range over the repeats. Below 3 spreads the effect is one a diagnoser can
# mistake for ordinary variation (hard); at 10 or more it is an order of magnitude above it (easy).
# NOISE_FLOOR: the range of 3 repeats can come out near 0 by chance; step times on this class of machine
# vary by more than 5% between runs (measured: healthy step-time CV 10-26% within a run), so a smaller
# measured spread is not trusted.
HARD_BELOW_Z = 3.0
EASY_FROM_Z = 10.0
NOISE_FLOOR = 0.05


class Verification(BaseModel):
    """Whether a positive case's injection showed, measured against its healthy twin."""

    metric: str = Field(description="The case's manifest metric")
    min_ratio: float
    injected: float = Field(description="Median over repeats of the metric with the faults (seconds)")
    healthy: float = Field(description="Median over repeats of the metric of the healthy twin (seconds)")
    ratio: float = Field(description="The case/twin ratio: the manifestation test's estimate (exp of the mean per-pair "
                         "log shift); injected / healthy in a record made before the test")
    noise: float = Field(
        description="Relative spread of the healthy twin's metric over repeats: (max - min) / median. "
        "A ratio whose excess over 1 is not well above this is not trustworthy."
    )
    repeats: int = Field(description="Repeat pairs (twin, case) recorded and tested")
    manifested: bool = Field(
        description="The manifestation test's decision: its p-value below its alpha and its estimate >= min_ratio "
        "(in a record made before the test: ratio >= min_ratio and every injected repeat above every healthy one)"
    )
    impact: float | None = Field(
        description="Measured fraction of step time lost: 1 - healthy/injected mean step time over the "
        "labeled steps (medians over repeats)"
    )
    test: ManifestTest | None = Field(None, description="What the manifestation test measured and decided; None in a "
                                      "record made before it (such a record is verified again)")
    label_problems: list[str] | None = Field(
        None, description="Each labeled cause its evidence does not support, with the numbers "
        "(recording/label_support.py); any makes manifested false. Empty: every checked cause holds; None: not "
        "checked (the injection did not manifest, or a record made before the check, which is verified again)")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def effect_to_noise(self) -> float:
        """(ratio - 1) over the twin's noise (floored at NOISE_FLOOR): how many run-to-run spreads the effect is."""
        return (self.ratio - 1.0) / max(self.noise, NOISE_FLOOR)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def difficulty(self) -> Difficulty:
        z = self.effect_to_noise
        return "hard" if z < HARD_BELOW_Z else "easy" if z >= EASY_FROM_Z else "medium"


class TruthRecord(BaseModel):
    """What the cache knows about a recording that must never be inside the bundle."""

    case_id: str
    role: Literal["case", "twin"] = Field("case", description="twin: the case's healthy twin (faults removed)")
    key: str
    repeat: int
    recorded: datetime
    verification: Verification | None = None
