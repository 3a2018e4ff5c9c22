"""What each recording of a job case draws (issue 44 item 1): which rank plays the culprit, and how many steps.

A diagnoser that ships the public case files can look a case up from what a bundle shows without analysis:
the workload family, the world size, the step count, the labeled rank (measured on main before this: workload,
world size and steps alone single out 8 of 28 live cases, and a 2-rank straggler's rank is the case file's).
So a job case recorded here is recorded as a *drawn* variant of itself (:func:`drawn_case`), from a seed that
never reaches a bundle (:func:`recording_draw`; kept in the recording's truth record, outside the bundle folder):

* **Ranks.** The ranks of a data-parallel job recorded on one machine are alike: every rank is one process
  with one thread on the same host, its data drawn the same way, its collectives the same. So which rank
  a rank-local fault sits on is the author's free choice, and the draw makes it again: a uniformly drawn
  permutation of the job's ranks, applied to every rank the case names (the faults' rank parameters, live
  and evidence edits alike, :data:`RANK_PARAMS`; the labels' ranks; the manifestation check's rank). The
  case is the same case with its ranks renamed, so its label follows the draw: the straggler of
  ``straggler-rank1`` lands on rank 0 in half the recordings, and its label then says rank 0.
  The rule per fault: a fault whose rank is a free choice moves (:data:`RANK_PARAMS`). A fault whose rank is
  not (:data:`FIXED_RANK`: rank 0 is the one rank that saves checkpoints, in the rank worker as in common
  data-parallel practice) keeps the whole case's ranks: one such fault and nothing moves. A fault with no rank
  parameter acts on every rank and moves nothing. A scaled-out job (``scale_out``) reads the recorded ranks
  the draw moved (which one it keeps whole, which one it copies) and places them where its author did among
  128 or 1024 (:data:`SCALED_RANK_PARAMS`): its labels name those scaled ranks and stay.
* **Steps.** The recorded step count is drawn within :func:`step_spread` (a fifth of the declared count, at
  least 2) around the case's declared one. What a step range of the case names keeps its steps (a fault
  starts at the same step); a labeled range that ends at the last step ends at the drawn last step. Drawn
  counts stay where every step parameter and labeled range still holds (:func:`step_choices`), where the
  profiler still records ``trace_steps`` steps after a warm-up step, and, for a periodic fault (a save every N
  steps), where the labeled steps, and the profiled steps, hold as many of its events as the declared count does:
  its cost per step is then the declared case's, diluted by at most a fifth. An evidence edit that keeps a window of the
  profiled steps (a shorter trace window, a scaled-out job's window) keeps it at the same steps, so counts
  stay where the profiled tail still holds it: where the window sits is what such a label depends on
  (``stall-late-window-before`` ends its window before the stall; ``hang-stall-1-of-1024`` keeps the step
  that hangs).
* **One recording, several cases.** The draw is the draw of the case's recording spec (its live part): a case
  derived by evidence edits takes its base's ranks and, where its own edits allow it, its base's step count
  (else the allowed count nearest to it), so that the two share one recording as they did before.

Why the calibration stays honest. Every check of a case runs on the drawn case's own recordings: the
manifestation test pairs the drawn case with its twin (the same drawn workload without faults, so the
same step count), the label check reads the drawn labeled rank, the control check the drawn steps. A
near-limit rung calibrated on rank 0 runs on rank 1 in half its recordings; the rungs' step metrics are
the mean over the job's ranks of each step (``step_time_median``: both ranks finish a step together, the
peer waiting in the collective), the same whichever rank is slow, and the label check compares the labeled
rank with its peer in the same recordings. The one asymmetry of the ranks, rank 0's checkpoint every
``checkpoint_every`` steps (10 by default; a small model's save), is in the twin as well. A step count within
a fifth moves a steady fault's per-step effect not at all, and the test's power by the steps added or
removed (the sequential test adds pairs where a look does not decide).

Deterministic per seed: the same seed and the same case give the same draw, so a cached recording is
found again. The seed of a case is derived from the bundle cache's own secret (``draw.secret`` beside the truth
files, made once at random) and the case's *recording* spec (workload and live faults, no evidence edits,
no labels): a case derived by evidence edits draws what the case it is derived from draws, so both still
share one recording, and every repeat of a verification records the same drawn case.
"""

from __future__ import annotations

import hashlib
import os
import random
import secrets
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from diageval.cases.model import Case

RANK_PARAMS: dict[str, tuple[str, ...]] = {
    # live faults whose rank is the author's free choice among alike ranks
    "slow_rank": ("target_rank",),
    "load_imbalance": ("heavier_rank",),
    "cpu_contention": ("contended_rank",),
    "collective_hang": ("target_rank",),
    "late_rank": ("target_rank",),
    # evidence edits: they name recorded ranks, which follow the recording's draw
    "drop_rank_trace": ("missing_rank",),
    "truncate_trace": ("cut_rank",),
    "clock_offset": ("offset_rank",),
    "sample_rank_traces": ("traced_ranks",),
    "zero_timestamps": ("zeroed_rank",),
    "merge_rank_traces": ("merged_into_rank",),
    "duplicate_events": ("duplicated_rank",),
    "truncate_gzip": ("cut_gzip_rank",),
    "device_clock_offset": ("device_clock_rank",),
    "scale_out": ("kept_rank", "copied_rank"),
}
"""Fault -> its parameters that name a rank, moved by the draw's permutation (module docstring)."""

FIXED_RANK: dict[str, str] = {
    "blocking_checkpoint": "rank 0 is the rank that saves checkpoints",
}
"""Faults whose rank is not a free choice: a case holding one keeps all its ranks (and why)."""

SCALED_RANK_PARAMS: dict[str, tuple[str, ...]] = {"scale_out": ("kept_at_rank", "traced_ranks")}
"""Parameters naming ranks of a scaled-out job (the author's placement among 128 or 1024): they and the labels,
which name the same scaled ranks, stay; the recorded ranks the edit reads (RANK_PARAMS) follow the draw."""

WINDOW_EDITS = frozenset({"trace_window", "scale_out"})
"""Evidence edits that keep a window of the profiled steps (``window_first_step``, ``window_steps``): drawn counts
keep the window where it is, inside the profiled tail (module docstring)."""

STEP_PARAM_BOUND: dict[str, int] = {"save_every_steps": 0, "empty_every_steps": 1, "window_steps": 0}
"""Step-valued parameters that are not a step index, and how far below the step count they must stay (a save
every N needs N <= steps; an empty every N needs N < steps); every ``*_step`` parameter is a step index (< steps)."""

STEP_SPREAD = 0.2
"""The drawn step count lies within this share of the declared one (at least :data:`MIN_STEP_SPREAD` steps). Measured
with the fingerprint strategy of ``tests/gaming_strategies.py`` (a diagnoser shipping the public case files that
matches workload family, world size, device and step count, knowing this rule, and claims where every public case
that could have made the bundle carries one label) on the CPU corpus' 106 live cases in strata of more than one
label (jobs that fail left out: their step log ends where they fail): over 20 draws, +0.0114 skill over null on
average at a tenth (+0.0285 in one draw: a periodic case's one-sided range singles it out at its top counts),
+0.0071 at 0.15 (at most +0.0143), and 0 in each of 60 draws at 0.18 and 0.2. A fifth keeps a 24-step rung's
labeled steps (from step 4) within 5 of its declared 20."""
MIN_STEP_SPREAD = 2
SECRET_NAME = "draw.secret"


class RecordingDraw(BaseModel):
    """What one job case's recordings drew (kept in the truth record, never in a bundle)."""

    seed: int
    ranks: list[int] = Field(description="Case rank r is recorded (and labeled) as rank ranks[r]; the identity when "
                                         "nothing moves")
    steps: int = Field(description="The recorded step count")
    declared_steps: int = Field(description="The case file's step count")
    labels_follow: bool = Field(True, description="The labels' ranks are recorded ranks and follow ``ranks``; false: a "
                                "scaled-out job's, which stay")

    @property
    def labeled_ranks(self) -> list[int] | None:
        """Where the labels' ranks went (what a run scores against, :meth:`~diageval.cases.model.Case.with_rank_draw`); None: where they were."""
        return self.ranks if self.labels_follow and self.ranks != sorted(self.ranks) else None

    def rank(self, r: int) -> int:
        return self.ranks[r] if 0 <= r < len(self.ranks) else r

    @property
    def identity(self) -> bool:
        return self.ranks == sorted(self.ranks) and self.steps == self.declared_steps


def drawable(case: Case) -> bool:
    """Whether ``case`` is recorded as a drawn variant: a job recorded here (not imported, not a fleet)."""
    return case.workload is not None and case.recorded is None and case.fleet is None


def labels_follow(case: Case) -> bool:
    """Whether the labels' ranks name recorded ranks (they follow the draw) or a scaled job's (they stay)."""
    return not any(f.name in SCALED_RANK_PARAMS for f in case.faults)


def fixed_rank_reason(case: Case) -> str | None:
    """Why ``case``'s ranks stay as the case file names them, or None when they move."""
    if case.workload is None or case.workload.world_size < 2:
        return "one rank"
    for f in case.faults:
        if f.name in FIXED_RANK:
            return f"{f.name}: {FIXED_RANK[f.name]}"
    return None


def step_spread(declared: int) -> int:
    return max(MIN_STEP_SPREAD, round(STEP_SPREAD * declared))


def _trace_steps(case: Case) -> int:
    from diageval.recording.workloads import WORKLOADS

    info = WORKLOADS.get(case.workload.name)
    return int(info.params_model.model_validate(case.workload.params).trace_steps) if info else 1


def _first_profiled(steps: int, trace_steps: int) -> int:
    """The first step the profiler records in a ``steps``-step recording: it records the last ``trace_steps`` after a
    warm-up step (``rank_worker.profiler_window``'s ``active``, written here so that drawing needs no torch)."""
    return steps - max(1, min(trace_steps, steps - 1))


def _periodic_events(case: Case, steps: int) -> list[tuple[int, int]]:
    """Per periodic fault of ``case``, its events within the labeled steps of a ``steps``-step recording and within
    its profiled steps: a drawn count must keep both, or the trace a diagnoser reads may hold no save the case
    file's trace held (slow-checkpoint-convnet-16, a save every 4 steps from step 3 with 3 steps traced: the declared
    16 steps trace the save at step 15, a drawn 19 traces 16-18, none; its label check then found the save at +1% of
    the step)."""
    first = _first_profiled(steps, _trace_steps(case))
    out = []
    for f in case.faults:
        if f.name == "blocking_checkpoint":
            every, start = int(f.params["save_every_steps"]), int(f.params.get("start_step", 0))
            saves = [s for s in range(start, steps) if (s + 1) % every == 0]
            out.append((len(saves), sum(1 for s in saves if s >= first)))
    return out


def step_choices(case: Case) -> list[int]:
    """The step counts ``case`` may be recorded with (module docstring); the declared one alone when none may move."""
    declared = case.workload.steps
    spread = step_spread(declared)
    traced = _trace_steps(case)
    floor = traced + 1  # the profiler's trace_steps after a warm-up step, as declared counts allow
    for f in case.faults:
        for name, value in f.params.items():
            if isinstance(value, bool) or not isinstance(value, int):
                continue
            if name.endswith("_step"):
                floor = max(floor, value + 1)
            elif name in STEP_PARAM_BOUND:
                floor = max(floor, value + STEP_PARAM_BOUND[name])
    for label in case.labels.causes:
        if label.steps is not None:
            start, stop = label.steps
            floor = max(floor, start + 1 if stop == declared else stop)
    events = _periodic_events(case, declared)
    windows = [(int(f.params["window_first_step"]), int(f.params["window_steps"])) for f in case.faults
               if f.name in WINDOW_EDITS]
    return [n for n in range(declared - spread, declared + spread + 1)
            if n >= min(floor, declared) and _periodic_events(case, n) == events
            and all(_first_profiled(n, traced) <= first and first + length <= n for first, length in windows)]


def _live_part(case: Case) -> Case:
    """``case`` without its evidence edits: what is recorded live."""
    from diageval.recording.faults import FAULTS

    return case.model_copy(update={"faults": [f for f in case.faults if FAULTS[f.name].load().stage != "bundle"]})


def case_seed(case: Case, secret: str) -> int:
    """The draw's seed for ``case``: the cache's secret and the case's recording spec (its live part)."""
    return int.from_bytes(hashlib.sha256(f"{secret}:{_live_part(case).spec_hash()}".encode()).digest()[:8], "big") >> 1


def draw_for(case: Case, seed: int) -> RecordingDraw:
    """The draw of ``case`` from ``seed`` (deterministic). It is the draw of the case's live part (its recording
    spec): a case derived by evidence edits takes its base's ranks and, where its own edits allow it, its base's step
    count (else the allowed count nearest to it), so that the two share one recording."""
    rng = random.Random(seed)
    base = _live_part(case)
    world = case.workload.world_size
    ranks = list(range(world))
    if fixed_rank_reason(base) is None:
        rng.shuffle(ranks)
    wanted = rng.choice(step_choices(base))
    allowed = step_choices(case)
    steps = min(allowed, key=lambda n: (abs(n - wanted), n))
    return RecordingDraw(seed=seed, ranks=ranks, steps=steps, declared_steps=case.workload.steps,
                         labels_follow=labels_follow(case))


def _move(value: Any, draw: RecordingDraw) -> Any:
    if isinstance(value, list):
        return sorted(draw.rank(v) for v in value)
    return draw.rank(value) if isinstance(value, int) and not isinstance(value, bool) else value


def drawn_case(case: Case, draw: RecordingDraw) -> Case:
    """``case`` as its recordings under ``draw`` make it: faults, labels and manifestation rank moved to the drawn
    ranks, the workload's steps the drawn count, a labeled step range ending at the last step ending at the drawn one."""
    if draw.identity:
        return case
    faults = []
    for f in case.faults:
        moved = {k: _move(v, draw) if k in RANK_PARAMS.get(f.name, ()) else v for k, v in f.params.items()}
        faults.append(f.model_copy(update={"params": moved}))
    declared = case.workload.steps
    causes = []
    for label in case.labels.causes:
        update: dict[str, Any] = {}
        if label.ranks is not None and draw.labels_follow:
            update["ranks"] = sorted(draw.rank(r) for r in label.ranks)
        if label.steps is not None and label.steps[1] == declared:
            update["steps"] = (label.steps[0], draw.steps)
        causes.append(label.model_copy(update=update))
    update: dict[str, Any] = {"faults": faults, "workload": case.workload.model_copy(update={"steps": draw.steps}),
                              "labels": case.labels.model_copy(update={"causes": causes})}
    if case.manifest is not None and case.manifest.rank is not None and draw.labels_follow:
        update["manifest"] = case.manifest.model_copy(update={"rank": draw.rank(case.manifest.rank)})
    return case.model_copy(update=update)


def cache_secret(cache: Path) -> str:
    """The bundle cache's draw secret (``draw.secret`` beside the truth files; made once, at random)."""
    path = Path(cache) / SECRET_NAME
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{SECRET_NAME}.{secrets.token_hex(4)}")
        tmp.write_text(secrets.token_hex(32) + "\n")
        try:
            os.link(tmp, path)  # the first writer's secret wins; every process then reads the same one
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    return path.read_text().strip()


def recording_draw(case: Case, cache: Path) -> RecordingDraw | None:
    """The draw of a job case recorded into ``cache`` (None for a case that is not drawn: imported, a fleet)."""
    if not drawable(case):
        return None
    return draw_for(case, case_seed(case, cache_secret(cache)))


def recorded_as(case: Case, cache: Path) -> tuple[Case, RecordingDraw | None]:
    """The case a job case's recordings in ``cache`` are (its drawn variant) and the draw; ``case`` itself and None
    for a case that is not drawn. Every path that records or verifies a case goes through here, so ``diageval
    record``, ``verify`` and ``run`` find one another's recordings."""
    draw = recording_draw(case, cache)
    return (case, None) if draw is None else (drawn_case(case, draw), draw)
