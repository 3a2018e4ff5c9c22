"""Ground truth the cache keeps beside (never inside) a bundle: who it was recorded for, and whether the
injection manifested (:class:`Verification`, computed by :mod:`diageval.recording.verify`)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class Verification(BaseModel):
    """Whether a positive case's injection showed, measured against its healthy twin."""

    metric: str = Field(description="The case's manifest metric")
    min_ratio: float
    injected: float = Field(description="Median over repeats of the metric with the faults (seconds)")
    healthy: float = Field(description="Median over repeats of the metric of the healthy twin (seconds)")
    ratio: float = Field(description="injected / healthy")
    noise: float = Field(
        description="Relative spread of the healthy twin's metric over repeats: (max - min) / median. "
        "A ratio whose excess over 1 is not well above this is not trustworthy."
    )
    repeats: int
    manifested: bool = Field(
        description="ratio >= min_ratio and (with 2+ repeats) every injected repeat above every healthy one"
    )
    impact: float | None = Field(
        description="Measured fraction of step time lost: 1 - healthy/injected mean step time over the "
        "labeled steps (medians over repeats)"
    )


class TruthRecord(BaseModel):
    """What the cache knows about a recording that must never be inside the bundle."""

    case_id: str
    role: Literal["case", "twin"] = Field("case", description="twin: the case's healthy twin (faults removed)")
    key: str
    repeat: int
    recorded: datetime
    verification: Verification | None = None
