"""The two kinds of fault injector and the hooks a live one may use.

* A :class:`LiveFault` runs inside every rank process while the workload trains. Each hook defaults to
  "change nothing"; an injector overrides the ones it needs and acts only on the ranks and steps its
  params name. The rank worker combines the case's live faults with :class:`Injection`.
* A :class:`BundleFault` edits the finished bundle folder before its manifest is written (evidence
  removed or damaged: the abstain cases).

Injectors must leave no name in the evidence: no ``record_function`` named after them, no log line
naming them, nothing in a stack (traces are recorded without ``with_stack``). Modules here import no
torch at the top, so the parent process can tell the two kinds apart cheaply.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any, ClassVar

from pydantic import BaseModel

from diageval.bundle.model import BundleEnv
from diageval.recording.context import RankContext


class LiveFault:
    stage: ClassVar[str] = "live"
    backends: ClassVar[tuple[str, ...]] = ("gloo", "nccl")  # where the injector works

    def __init__(self, params: BaseModel, ctx: RankContext):
        self.params = params
        self.ctx = ctx

    def dataset(self, dataset: Any) -> Any:
        """Wrap the training dataset (before the DataLoader is built)."""
        return dataset

    def model(self, model: Any) -> Any:
        """Change the model (before it is moved to the device and wrapped for data parallelism)."""
        return model

    def after_setup(self) -> None:
        """Called once every rank has built its workload (after a barrier), before step 0."""

    def on_step_start(self, step: int) -> None:
        """Called at the start of every step, inside the timed step."""

    def checkpoint_due(self, step: int) -> bool:
        """True to save a checkpoint at the end of ``step`` (in addition to the workload's own ones)."""
        return False

    def checkpoint_file(self, fh: IO[bytes], step: int) -> IO[bytes]:
        """Wrap the file a checkpoint is written to."""
        return fh

    def profiler_options(self) -> dict[str, Any]:
        """Options of the rank's ``torch.profiler.profile`` to change (e.g. ``with_stack``); none by default."""
        return {}


class BundleFault:
    stage: ClassVar[str] = "bundle"

    def __init__(self, params: BaseModel):
        self.params = params

    def apply(self, bundle_dir: Path) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def check_present(self, bundle_dir: Path) -> None:
        """Raise (``EvidenceEditError``) when what the edit breaks is not in the derived bundle; run once every edit
        of the case is applied (``cache.derive_bundle``). Nothing to check by default."""

    def bundle_env(self, env: BundleEnv) -> BundleEnv:
        """The derived bundle's ``env`` (its ``bundle.json``), from the source's; unchanged unless the edit
        changes what the job was (``scale_out``: its world size)."""
        return env

    def recorded_rank(self, rank: int) -> int | None:
        """The rank of the source recording whose timing rank ``rank`` of the derived bundle shows, for an edit
        that keeps every rank's timing and only moves ranks (``scale_out``): the manifestation check and the
        label checks can then run on the source recordings (:func:`diageval.recording.verify.verification_subject`).
        None (every other edit): the derived bundle itself is checked."""
        return None


class Injection:
    """The live faults of one rank, applied in the order the case lists them."""

    def __init__(self, faults: list[LiveFault]):
        self.faults = faults

    def dataset(self, dataset: Any) -> Any:
        for f in self.faults:
            dataset = f.dataset(dataset)
        return dataset

    def model(self, model: Any) -> Any:
        for f in self.faults:
            model = f.model(model)
        return model

    def after_setup(self) -> None:
        for f in self.faults:
            f.after_setup()

    def on_step_start(self, step: int) -> None:
        for f in self.faults:
            f.on_step_start(step)

    def checkpoint_due(self, step: int) -> bool:
        return any(f.checkpoint_due(step) for f in self.faults)

    def checkpoint_file(self, fh: IO[bytes], step: int) -> IO[bytes]:
        for f in self.faults:
            fh = f.checkpoint_file(fh, step)
        return fh

    def profiler_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {}
        for f in self.faults:
            options.update(f.profiler_options())
        return options
