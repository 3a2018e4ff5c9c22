"""The vocabulary of recording's face: what recording does for a run or a command (:class:`RecordingPolicy`, one
frozen object that travels whole: to the evidence function, to an executor that records on other machines, to the
in-job monitor's recording), what preparing a case's evidence answers (:class:`PreparedEvidence`) and the function
that does (:data:`EvidenceFn`). Recording's face (:mod:`diageval.recording`) takes the policy; its internals still
take their own keywords."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from diageval.cases.load import LoadedCase
from diageval.recording.draw import RecordingDraw
from diageval.recording.truth import ControlCheck, Verification

Device = Literal["auto", "cpu", "cuda"]


class RecordingPolicy(BaseModel):
    """What to record (verify or not, force), where (the bundle cache, the data folder of recorded cases), on
    which device, and with which in-job monitor in the job, if any."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device: Device = Field("auto", description="auto: CUDA where the case needs it and this machine has it, else cpu")
    verify: bool = Field(True, description="check a positive case's manifestation and a healthy control's shown "
                                           "evidence (stored checks are reused unless force)")
    force: bool = Field(False, description="record (and verify) again even when the cache has it")
    cache_dir: Path | None = Field(None, description="the bundle cache (default: diageval.paths.bundle_cache_dir(); an "
                                   "executor that records elsewhere gives its own private one there)")
    data_dir: Path | None = Field(None, description="where recorded cases' trace files are (default: the data "
                                  "folders of diageval.paths)")
    monitor: str | None = Field(None, description="an in-job monitor of the registry (recording/monitors): each case "
                                "is recorded once more with it installed, and that bundle is the evidence")


class PreparedEvidence(BaseModel):
    """What preparing a case's evidence answers, as it comes (from this process or a recorder node): the bundle and
    the checks made on it; :func:`~diageval.recording.prepare.prepare_case` judges it."""

    case_id: str
    bundle_dir: Path
    bundle_id: str
    manifest_sha256: str
    verification: Verification | None = Field(description="None for healthy and abstain cases")
    control: ControlCheck | None = Field(None, description="A healthy control or confounder: its shown evidence checked "
                                                           "for a labeled cause's pattern (problems make it invalid); "
                                                           "None for every other case or when not verified")
    shown_values: dict[str, str] = Field(default_factory=dict, description="A regression or fleet: its factor values "
                                         "('name=value') -> the words its bundle shows (drawn per assembly, kept in "
                                         "the truth record); the case is scored in them")
    draw: RecordingDraw | None = Field(None, description="A job case recorded here: what its recording drew (the "
                                       "labels' ranks follow it: score it against Case.with_rank_draw)")


EvidenceFn = Callable[[LoadedCase, RecordingPolicy], PreparedEvidence]
"""What prepares a case's evidence under a policy: :func:`prepare_evidence`; tests stand in for it, and an executor
that recorded elsewhere hands back its answer as one."""
