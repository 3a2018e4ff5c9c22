"""Evidence tiers: named subsets of a bundle, and which taxonomy causes each can show.

A platform team chooses which signals its fleet collects; each tier below adds one signal to the one
before it (the files each keeps are :func:`diageval.run.evidence_tiers.tier_of_path`'s):

========== ============================================================ ====================================
tier       adds                                                         what the signal holds
========== ============================================================ ====================================
steps      ``steps.jsonl``                                              rank, step, t_start, t_end: how long
                                                                        each step took on each rank, nothing
                                                                        of what it spent the time on
metrics    ``metrics.jsonl``                                            periodic host samples: the host's CPU
                                                                        % and memory, each rank's own CPU %
                                                                        and RSS (GPU where available)
one-rank   ``rank0/``: rank 0's profiler trace                          one rank's ops, shapes, runtime calls,
                                                                        kernels and collectives; rank 0 because
                                                                        it is the rank a job traces and keeps
                                                                        by default (the one that logs and
                                                                        checkpoints)
traces     every ``rank<N>/`` trace and ``logs/``                       the same for every rank, so ranks can
                                                                        be compared; what each script printed
                                                                        (a collective timeout, a save's time)
full       ``flight_recorder/`` (and anything else): today's bundle     each rank's collective sequence with
                                                                        its enqueue and completion times
========== ============================================================ ====================================

:data:`CAUSE_TIERS` says, for every taxonomy cause, the lowest tier whose signals can show it, with the
reason drawn from what each signal holds and what the taxonomy's ``evidence`` line says tells the cause
apart. :func:`label_shown` is the one rule that turns this into labels: a label whose evidence a tier
cannot show is taken out of the case as scored under that tier, and a positive case with no label left
is scored as ``expect: abstain`` (:func:`case_under_tier`), so a diagnoser is never blamed for what the
tier cannot show. Healthy and abstain cases are scored as they are: a tier removes evidence of causes,
and those cases have none to remove.

Symptoms (slow steps, spikes) are visible from ``steps`` on, but naming a cause needs what tells causes
apart: the step log says *that* a step was slow, never *why*, so no cause is shown at ``steps``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from diageval.cases.model import Case, CauseLabel, Labels

EvidenceTier = Literal["steps", "metrics", "one-rank", "traces", "full"]
TIERS: tuple[EvidenceTier, ...] = ("steps", "metrics", "one-rank", "traces", "full")  # each holds the one before
ONE_RANK = 0  # the rank whose trace the one-rank tier keeps: the one a job traces and keeps by default
FULL: EvidenceTier = "full"


class CauseTier(BaseModel):
    """The lowest tier that can show a cause, and why (from what the signals hold)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lowest: EvidenceTier
    why: str


CAUSE_TIERS: dict[str, CauseTier] = {
    "input.dataloader_starvation": CauseTier(
        lowest="one-rank",
        why="every rank waits for its batch, so one rank's trace shows the DataLoader wait; step times and CPU % "
            "only say the steps are slow"),
    "checkpoint.blocking_save": CauseTier(
        lowest="one-rank",
        why="the periodic slow steps are in the step log, but that the time goes to a save (not data, compute or "
            "a collective) is seen only in the saving rank's trace; the job saves on rank 0, the one-rank tier's rank"),
    "comm.collective_stall": CauseTier(
        lowest="traces",
        why="long collectives on one rank are also what a late peer causes; only every rank's trace shows the ranks "
            "arriving together and still waiting"),
    "comm.collective_hang": CauseTier(
        lowest="traces",
        why="the collective timeout is in the ranks' logs and where each rank stopped is in every rank's trace; "
            "the step log only ends early"),
    "compute.straggler_rank": CauseTier(
        lowest="traces",
        why="synchronised ranks end every step together, so per-rank step times are equal; the late rank is seen "
            "only by comparing its compute and collective waits with its peers' traces"),
    "launch.kernel_launch_overhead": CauseTier(
        lowest="one-rank",
        why="the op and kernel counts and durations per step are in a trace; every rank launches the same ops"),
    "host.device_sync": CauseTier(
        lowest="one-rank",
        why="synchronize calls and blocking copies are runtime calls, seen in the syncing rank's trace only"),
    "compute.load_imbalance": CauseTier(
        lowest="traces",
        why="told from a straggler by the input shapes of the same ops on different ranks: needs every rank's trace"),
    "host.cpu_contention": CauseTier(
        lowest="metrics",
        why="metrics.jsonl holds the host's CPU % beside each rank's own: a host busier than its ranks add up to, "
            "with a rank getting less CPU than its peers, is the taxonomy's mark of contention, and names the rank"),
    "comm.exposed_communication": CauseTier(
        lowest="traces",
        why="gradient collectives after the last backward op are in one rank's trace, but telling them from a "
            "stall or a straggler (ranks arriving together, bytes at normal speed) needs every rank's"),
    "memory.allocator_churn": CauseTier(
        lowest="one-rank",
        why="allocation and free runtime calls every step are in the churning rank's trace only"),
    "measurement.profiler_overhead": CauseTier(
        lowest="one-rank",
        why="what the costly profiler options leave (stacks, input shapes, memory events on the ops) is in the "
            "measured run's trace; step times only say the run is slower"),
    "compile.recompilation": CauseTier(
        lowest="one-rank",
        why="the slow steps are in the step log, but that their time goes to the compiler is seen only in the "
            "trace's compile regions; every rank compiles alike"),
    "compute.numeric_precision": CauseTier(
        lowest="one-rank",
        why="the wider input types of the same ops are in a trace recorded with shapes; step times only say "
            "the run is slower"),
}


def tier_index(tier: str) -> int:
    """Position of ``tier`` on the ladder (0 = steps); a clear error for an unknown name."""
    if tier not in TIERS:
        raise ValueError(f"unknown evidence tier {tier!r}; expected one of {', '.join(TIERS)}")
    return TIERS.index(tier)


def traced_ranks(case: Case, label: CauseLabel | None = None) -> set[int]:
    """The ranks whose profiler trace the case's full bundle holds.

    Injected cases trace every rank and recorded cases the ranks of their files, less what the case's
    evidence edits take away: ``drop_rank_trace`` its ``missing_rank``, ``sample_rank_traces`` all but its
    ``traced_ranks`` (``truncate_trace`` leaves a damaged file in place). tests/cases/test_evidence_tiers.py
    checks this against the edits themselves.

    A regression or fleet (each run its own bundle, cut to a tier run by run): the ranks every run traces,
    or, for a ``label`` behind a factor value, every run that holds the value (the runs its cause sits in;
    a diagnoser compares them with the others, whose traces the same tier cuts alike).
    """
    if case.fleet is not None:
        runs = case.fleet.runs_with(label.factor) if label is not None and label.factor is not None else case.fleet.runs
        return set.intersection(*(_run_traced_ranks(case, run) for run in runs)) if runs else set()
    ranks = {f.rank for f in case.recorded.files} if case.recorded is not None else set(range(case.world_size))
    return _less_edited(ranks, case.faults)


def _run_traced_ranks(case: Case, run) -> set[int]:
    """The ranks one run of a regression or fleet traces: its recorded files', or the workload's less the edits
    behind its factor values."""
    assert case.fleet is not None
    if run.recorded is not None:
        return {f.rank for f in run.recorded.files}
    assert case.workload is not None
    return _less_edited(set(range(case.workload.world_size)), case.fleet.faults_of(run))


def _less_edited(ranks: set[int], faults) -> set[int]:
    ranks = set(ranks)
    for fault in faults:
        if fault.name == "drop_rank_trace":
            ranks.discard(fault.params.get("missing_rank"))
        elif fault.name == "sample_rank_traces" or (fault.name == "scale_out" and fault.params.get("traced_ranks")):
            ranks &= set(fault.params.get("traced_ranks", ()))
    return ranks


def label_shown(case: Case, label: CauseLabel, tier: EvidenceTier) -> str | None:
    """The rule: None when ``tier`` can show ``label``'s cause in ``case``, else why it cannot.

    A label is shown when the tier is at or above its cause's lowest tier (:data:`CAUSE_TIERS`). At
    ``one-rank``, a cause whose evidence is in a trace is shown only when the bundle traces rank
    :data:`ONE_RANK` and the label concerns it (names no ranks, or names rank 0): a cause sitting on
    another rank leaves nothing in rank 0's trace. ``full`` shows every label (it is the whole bundle,
    the tier the case's labels were written for). A cause outside the table is shown only at ``full``.
    """
    if tier_index(tier) == tier_index(FULL):
        return None
    need = CAUSE_TIERS.get(label.category)
    if need is None:
        return f"{label.category} has no lowest tier in diageval.cases.tiers.CAUSE_TIERS: shown at full only"
    if tier_index(tier) < tier_index(need.lowest):
        return f"{label.category} needs the {need.lowest} tier: {need.why}"
    if tier == "one-rank" and need.lowest == "one-rank":
        if ONE_RANK not in traced_ranks(case, label):
            return f"{label.category} needs a trace and this case's evidence has no rank {ONE_RANK} trace"
        if label.ranks is not None and ONE_RANK not in label.ranks:
            return f"{label.category} sits on rank(s) {label.ranks}; the one-rank tier keeps rank {ONE_RANK}'s trace"
    return None


def case_under_tier(case: Case, tier: EvidenceTier) -> Case:
    """``case`` as scored under ``tier``: the labels :func:`label_shown` hides are taken out, and a positive
    case left without a label expects abstention. ``full`` returns ``case`` itself."""
    if tier_index(tier) == tier_index(FULL):
        return case
    kept = [label for label in case.labels.causes if label_shown(case, label, tier) is None]
    if len(kept) == len(case.labels.causes):
        return case
    expect = case.labels.expect if kept else "abstain"
    labels = Labels(causes=kept, symptoms=case.labels.symptoms, expect=expect)
    return case.model_copy(update={"labels": labels, "manifest": case.manifest if kept else None})
