"""Ground truth the cache keeps beside (never inside) a bundle: who it was recorded for, and whether the
injection manifested (:class:`Verification`, computed by :mod:`diageval.recording.verify`)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, computed_field

from diageval.recording.draw import RecordingDraw
from diageval.recording.manifest_test import ManifestTest

Difficulty = Literal["easy", "medium", "hard"]

# A case's difficulty is how far its injection's effect stands above the run-to-run noise of its healthy
# twin: z = (ratio - 1) / noise. Below 3 spreads the effect is one a diagnoser can mistake for ordinary
# variation (hard); at 10 or more it is an order of magnitude above it (easy).
# The noise is the manifestation test's sd of one repeat pair's log shift (``ManifestTest.shift_sd``): how far
# one healthy recording's step time lies from another's, pooled over the pairs and never below the
# recording-level shift measured on 226 twin/twin pairs of a CI run (manifest_test.RECORDING_SHIFT_SD, 0.19);
# for a fleet, the sd of its healthy runs' log step times (fleet_verify.py), which has no such floor.
# Before the test it was the twin's range over its 2-3 repeats, an estimate with one or two degrees of
# freedom that two agreeing twin recordings bring near 0 (in the last fresh-clone CI cache 22 of 57 CPU
# cases had a range under 0.1 where the pairs' pooled sd was 0.19-0.50): a case's difficulty then said more
# about the luck of its twins than about the case. A record made before the test keeps the range, floored
# at NOISE_FLOOR: step times on this class of machine vary by more than 5% between runs (measured: healthy
# step-time CV 10-26% within a run).
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
    shown_checked: bool = Field(False, description="The labels were checked on the recording a diagnoser is shown "
                                "(repeat 0; recording/label_support.py: shown_support), its problems among "
                                "label_problems. False: a record made before that check (or one not manifested), "
                                "whose repeat 0 may not hold its labels: verified again")
    checks: int = Field(0, description="The version of the label checks the record was made under "
                        "(recording/label_support.py: CHECKS_VERSION); a manifested record of an older one is verified "
                        "again, its recordings reused")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def effect_to_noise(self) -> float:
        """(ratio - 1) over the run-to-run noise: how many spreads of a healthy recording the effect is (the
        test's shift sd, or the twin's range in a record made before the test), floored at NOISE_FLOOR (a fleet's
        healthy runs can agree exactly)."""
        noise = self.test.shift_sd if self.test is not None else self.noise
        return (self.ratio - 1.0) / max(noise, NOISE_FLOOR)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def difficulty(self) -> Difficulty:
        z = self.effect_to_noise
        return "hard" if z < HARD_BELOW_Z else "easy" if z >= EASY_FROM_Z else "medium"


class FleetDraw(BaseModel):
    """What a fleet bundle's assembly drew for its runs (:func:`diageval.recording.fleet.draw_runs`): the seed and,
    per run of the case (by its name in the case file), the name and start order ``fleet.json`` gives it, and per
factor value the word it shows. Kept
    here, outside the bundle: the case file's run names must not reach a diagnoser (they name the case), and the
    verification reads the runs back under the case's names through it."""

    seed: int
    names: dict[str, str] = Field(description="The case's run name -> the run's name in fleet.json")
    starts: dict[str, int] = Field(description="The case's run name -> the run's start order in fleet.json")
    values: dict[str, str] = Field(default_factory=dict, description="The case's factor value (``name=value``) -> the "
                                   "word fleet.json shows for it (issue 39: drawn so that no word predicts a label); "
                                   "empty in a record made before values were drawn (the case's words were shown)")

    def shown_metadata(self, metadata: dict[str, str]) -> dict[str, str]:
        """A run's metadata (factor -> the case's value) in the words fleet.json shows."""
        return {k: self.values.get(f"{k}={v}", v) for k, v in metadata.items()}

    def case_names(self) -> dict[str, str]:
        """fleet.json's run name -> the case's."""
        return {drawn: name for name, drawn in self.names.items()}


class ControlCheck(BaseModel):
    """A healthy control's or confounder's shown evidence (its bundle, repeat 0) against its twin's recordings: does
    it show a labeled cause's pattern beyond the twin's spread? (recording/label_support.py:
    :func:`~diageval.recording.label_support.control_support`). A healthy regression or fleet: does its bundle show a
    slowdown beyond its noise? (recording/fleet_verify.py: ``healthy_fleet_check``)"""

    twins: int = Field(description="Twin recordings the spread was measured on (a healthy regression: its recorded "
                                   "pairs; a healthy fleet: its runs)")
    pair: int | None = Field(None, description="A healthy regression: the recorded pair its bundle shows (0: the first); "
                                               "None otherwise")
    checked: list[str] = Field(description="What was checked, with the numbers, or why nothing was")
    problems: list[str] = Field(description="Each pattern the shown evidence holds beyond the twin's spread; any makes "
                                            "the case invalid (never scored)")


class TruthRecord(BaseModel):
    """What the cache knows about a recording that must never be inside the bundle."""

    case_id: str
    role: Literal["case", "twin"] = Field("case", description="twin: the case's healthy twin (faults removed)")
    key: str
    repeat: int
    recorded: datetime
    verification: Verification | None = None
    fleet_draw: FleetDraw | None = Field(None, description="A fleet or regression bundle: its runs' drawn names and order")
    control: ControlCheck | None = Field(None, description="Healthy controls and confounders: the shown evidence checked "
                                                           "for a labeled cause's pattern; None: not checked yet")
    draw: RecordingDraw | None = Field(None, description="A job case recorded here: what its recordings drew (the ranks "
                                       "its labels sit on, its step count; recording/draw.py); None: nothing drawn")
