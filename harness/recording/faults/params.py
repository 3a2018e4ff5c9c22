"""Strict parameter models of the built-in faults, and their checks against the workload.

Parameter names are deliberately distinctive (``target_rank``, never ``rank``): a test asserts that no
fault parameter name occurs anywhere in a bundle, and a generic name would collide with every trace.

Size: one strict model and one workload check per built-in fault (live faults and evidence edits), each a
few lines; split by kind, each half would still be looked up by the one registry in ``faults/__init__.py``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from diageval.cases.model import WorkloadSpec


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataloaderStarvationParams(_Params):
    extra_prep_ms: float = Field(0, ge=0, le=10_000, description="Extra time to prepare each batch, waited (storage "
                                 "or a remote source): a fixed cost, so its ratio to the step moves with the machine")
    extra_decode_kib: int = Field(0, ge=0, le=65_536, description="Extra CPU work to prepare each batch: inflating "
                                  "this many KiB of zlib data (decoding; at most 64 MiB, held in memory); its time scales "
                                  "with the machine's speed")
    start_step: int = Field(0, ge=0, description="First step whose batch is slow")

    @model_validator(mode="after")
    def _some_extra(self) -> "DataloaderStarvationParams":
        if self.extra_prep_ms <= 0 and self.extra_decode_kib <= 0:
            raise ValueError("extra_prep_ms or extra_decode_kib: expected at least one above 0 (the batch's extra cost)")
        return self


class BlockingCheckpointParams(_Params):
    save_every_steps: int = Field(ge=1, description="Rank 0 saves a checkpoint synchronously every N steps")
    write_mb_per_s: float = Field(gt=0, description="Throughput of the (slow) storage the checkpoint is written to")
    start_step: int = Field(0, ge=0, description="No slow save before this step")


class CollectiveStallParams(_Params):
    pacing_bytes_per_s: int = Field(ge=10_000, description="Send-rate cap on every rank's collective sockets")
    start_step: int = Field(0, ge=0, description="The cap is applied at the start of this step")


class SlowRankParams(_Params):
    target_rank: int = Field(ge=0, description="The rank that computes slower")
    slowdown_factor: float = Field(gt=1.0, le=20.0, description="Its compute takes this many times as long")
    start_step: int = Field(0, ge=0, description="First slow step")


class KernelLaunchOverheadParams(_Params):
    pieces_per_layer: int = Field(ge=2, le=1024, description="Each layer runs as this many small ops over batch slices")


class OneOffPauseParams(_Params):
    pause_step: int = Field(ge=0, description="The step that stalls (on every rank)")
    pause_ms: float = Field(gt=0, le=60_000, description="How long it stalls")


class CollectiveHangParams(_Params):
    target_rank: int = Field(ge=0, description="The rank that falls out of step with its peers' collectives")
    hang_step: int = Field(ge=0, description="The step at which it does")
    desync: Literal["skip", "reorder", "stall"] = Field(
        description="skip: it skips a collective its peers enter; reorder: it issues two collectives in the "
        "other order; stall: it blocks before its collective"
    )
    collective_timeout_s: float = Field(3.0, ge=1.0, le=60.0, description="The job's collective timeout")


class LateRankParams(_Params):
    target_rank: int = Field(ge=0, description="The rank that is late once")
    late_step: int = Field(ge=0, description="The step at which it is late")
    late_ms: float = Field(gt=0, le=60_000, description="How long it blocks (below the collective timeout)")
    collective_timeout_s: float = Field(3.0, ge=1.0, le=60.0, description="The job's collective timeout")


class DropRankTraceParams(_Params):
    missing_rank: int = Field(ge=0, description="Whose profiler trace is removed from the bundle")


class TruncateTraceParams(_Params):
    cut_rank: int = Field(ge=0, description="Whose profiler trace is cut short")
    keep_fraction: float = Field(gt=0, lt=1, description="Fraction of the raw trace bytes kept")


def _rank_ok(field: str, rank: int, workload: WorkloadSpec) -> list[tuple[str, str]]:
    if rank >= workload.world_size:
        return [(field, f"rank {rank} is out of range for world_size {workload.world_size} (expected 0..{workload.world_size - 1})")]
    return []


def _step_ok(field: str, step: int, workload: WorkloadSpec) -> list[tuple[str, str]]:
    if step >= workload.steps:
        return [(field, f"step {step} is not before the workload's {workload.steps} steps")]
    return []


def _multi_rank(workload: WorkloadSpec) -> list[tuple[str, str]]:
    if workload.world_size < 2:
        return [("", "needs world_size >= 2 (there is no collective to slow down or wait in)")]
    return []


def check_dataloader_starvation(p: DataloaderStarvationParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    return _step_ok("start_step", p.start_step, w)


def check_blocking_checkpoint(p: BlockingCheckpointParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    out = _step_ok("start_step", p.start_step, w)
    if p.save_every_steps > w.steps:
        out.append(("save_every_steps", f"{p.save_every_steps} is more than the workload's {w.steps} steps: no save would happen"))
    return out


def check_collective_stall(p: CollectiveStallParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    return _multi_rank(w) + _step_ok("start_step", p.start_step, w)


def check_slow_rank(p: SlowRankParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    return _multi_rank(w) + _rank_ok("target_rank", p.target_rank, w) + _step_ok("start_step", p.start_step, w)


def check_one_off_pause(p: OneOffPauseParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    return _step_ok("pause_step", p.pause_step, w)


def check_drop_rank_trace(p: DropRankTraceParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    return _rank_ok("missing_rank", p.missing_rank, w)


def check_truncate_trace(p: TruncateTraceParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    return _rank_ok("cut_rank", p.cut_rank, w)


def check_collective_hang(p: CollectiveHangParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    return _multi_rank(w) + _rank_ok("target_rank", p.target_rank, w) + _step_ok("hang_step", p.hang_step, w)


def check_late_rank(p: LateRankParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    out = _multi_rank(w) + _rank_ok("target_rank", p.target_rank, w) + _step_ok("late_step", p.late_step, w)
    if p.late_ms >= 1000 * p.collective_timeout_s:
        out.append(("late_ms", f"{p.late_ms} ms reaches the collective timeout ({p.collective_timeout_s} s): "
                               "the job would fail; keep it below"))
    return out


# --- evidence noise and evidence loss (bundle edits; harness/recording/faults/bundle_edits.py) ---------
# (imported here so that these additions stay appended at the end of the file)
from pydantic import field_validator  # noqa: E402


class ClockOffsetParams(_Params):
    offset_rank: int = Field(ge=0, description="The rank whose host clock is off")
    offset_ms: float = Field(ge=-10_000, le=10_000, description="How far its clock is off (ms; 1 ms to 10 s either way)")

    @field_validator("offset_ms")
    @classmethod
    def _not_tiny(cls, v: float) -> float:
        if abs(v) < 1.0:
            raise ValueError(f"{v} ms is below 1 ms, within what hosts on one network agree on; use at least 1 ms either way")
        return v


class SampleRankTracesParams(_Params):
    traced_ranks: list[int] = Field(min_length=1, description="The ranks whose profiler traces are kept")

    @field_validator("traced_ranks")
    @classmethod
    def _distinct(cls, v: list[int]) -> list[int]:
        if any(r < 0 for r in v) or len(set(v)) != len(v):
            raise ValueError("expected distinct ranks >= 0")
        return v


class TraceWindowParams(_Params):
    window_first_step: int = Field(ge=0, description="The first profiled step kept in the traces")
    window_steps: int = Field(ge=1, description="How many profiled steps the traces keep from there")
    window_step_share: float | None = Field(None, gt=0, lt=1, description="Keep only this share of the one kept "
                                            "step (a window of part of a step, profiled by hand: no step marker)")
    window_start_share: float = Field(0.0, ge=0, lt=1, description="With window_step_share: where in the step the "
                                      "window starts, as a share of the step")

    @model_validator(mode="after")
    def _part_of_one_step(self) -> "TraceWindowParams":
        if self.window_step_share is None:
            if self.window_start_share:
                raise ValueError("window_start_share: only with window_step_share (a window of part of a step)")
            return self
        if self.window_steps != 1:
            raise ValueError(f"window_steps: {self.window_steps}, expected 1 with window_step_share (part of one step)")
        if self.window_start_share + self.window_step_share > 1:
            raise ValueError(f"window_start_share + window_step_share = "
                             f"{self.window_start_share + self.window_step_share:g}: the window ends past the step (at most 1)")
        return self


class DropStepMarkersParams(_Params):
    drop_step_log: bool = Field(False, description="Also remove steps.jsonl (a job that logs no step times)")


class DropDeviceEventsParams(_Params):
    pass


class ZeroTimestampsParams(_Params):
    zeroed_rank: int = Field(ge=0, description="The rank whose trace loses some events' times (written as ts 0)")
    zeroed_share: float = Field(gt=0, le=1, description="The share of its timed events stamped 0, spread evenly")


class MergeRankTracesParams(_Params):
    merged_into_rank: int = Field(0, ge=0, description="The rank whose trace file receives every rank's events")


class DropDistributedInfoParams(_Params):
    pass


class DuplicateEventsParams(_Params):
    duplicated_rank: int = Field(ge=0, description="The rank whose trace holds every event twice")


class DropFlowEventsParams(_Params):
    pass


class TruncateGzipParams(_Params):
    cut_gzip_rank: int = Field(ge=0, description="The rank whose compressed trace is cut short")
    kept_gzip_fraction: float = Field(gt=0, lt=1, description="Fraction of the compressed bytes kept")


class DeviceClockOffsetParams(_Params):
    device_clock_rank: int = Field(ge=0, description="The rank whose device clock disagrees with its host's")
    device_clock_offset_us: float = Field(ge=-1e7, le=1e7, description="How far its device events move (us; "
                                          "negative: the device's clock behind the host's)")

    @field_validator("device_clock_offset_us")
    @classmethod
    def _not_zero(cls, v: float) -> float:
        if abs(v) < 1.0:
            raise ValueError(f"{v} us is below 1 us, within a timestamp's resolution; use at least 1 us either way")
        return v


def check_device_clock_offset(p: DeviceClockOffsetParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    return _rank_ok("device_clock_rank", p.device_clock_rank, w)


class RenameCommKernelsParams(_Params):
    pass


def check_zero_timestamps(p: ZeroTimestampsParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    return _rank_ok("zeroed_rank", p.zeroed_rank, w)


def check_merge_rank_traces(p: MergeRankTracesParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    return _multi_rank(w) + _rank_ok("merged_into_rank", p.merged_into_rank, w)


def check_duplicate_events(p: DuplicateEventsParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    return _rank_ok("duplicated_rank", p.duplicated_rank, w)


def check_truncate_gzip(p: TruncateGzipParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    return _rank_ok("cut_gzip_rank", p.cut_gzip_rank, w)


def check_clock_offset(p: ClockOffsetParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    return _multi_rank(w) + _rank_ok("offset_rank", p.offset_rank, w)


def check_sample_rank_traces(p: SampleRankTracesParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    out = [x for r in p.traced_ranks for x in _rank_ok("traced_ranks", r, w)]
    if len(p.traced_ranks) >= w.world_size:
        out.append(("traced_ranks", f"keeps all {w.world_size} ranks' traces: nothing is sampled out"))
    return out


def _profiled_steps(w: WorkloadSpec) -> range | None:
    """The steps the rank worker profiles for this workload (its last ``trace_steps``), or None if unknown."""
    from diageval.recording.workloads import WORKLOADS

    info = WORKLOADS.get(w.name)
    try:
        trace_steps = info.params_model.model_validate(w.params).trace_steps if info else None
    except ValueError:
        return None  # the workload check reports bad params
    if not isinstance(trace_steps, int):
        return None
    active = max(1, min(trace_steps, w.steps - 1))  # as rank_worker.profiler_window
    return range(w.steps - active, w.steps)


def check_trace_window(p: TraceWindowParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    profiled = _profiled_steps(w)
    last = p.window_first_step + p.window_steps - 1
    if profiled is None:
        return _step_ok("window_first_step", last, w)
    if p.window_first_step not in profiled or last not in profiled:
        return [("window_first_step", f"steps {p.window_first_step}..{last} are not all profiled "
                                      f"(the profiler records steps {profiled[0]}..{profiled[-1]})")]
    if p.window_steps == len(profiled) and p.window_step_share is None:
        return [("window_steps", f"keeps all {len(profiled)} profiled steps: the window is not shorter")]
    return []


# --- CUDA-only faults (harness/recording/faults/cuda.py) ---------------------------------------------


class HostDeviceSyncParams(_Params):
    sync_call: Literal["item", "synchronize"] = Field(
        description="item: read one value of a layer's output on the host; synchronize: torch.cuda.synchronize()")
    syncs_per_step: int = Field(ge=1, le=256, description="After how many parametrised layers' forward the host waits")


class PageableCopiesParams(_Params):
    copy_mb: float = Field(gt=0, le=1024, description="MB of host data in pageable memory copied to the device each time")
    copies_per_step: int = Field(1, ge=1, le=256, description="Before how many parametrised layers' forward a copy is made")


class AllocatorChurnParams(_Params):
    empty_every_steps: int = Field(1, ge=1, description="torch.cuda.empty_cache() at the start of every N-th step")


def check_allocator_churn(p: AllocatorChurnParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    if p.empty_every_steps >= w.steps:
        return [("empty_every_steps", f"{p.empty_every_steps} is not below the workload's {w.steps} steps: at most one empty")]
    return []
class CpuContentionParams(_Params):
    contended_rank: int = Field(ge=0, description="The rank whose core the competing processes run on")
    competitors: int = Field(1, ge=1, le=8, description="How many busy processes compete for that core")
    duty_cycle: float = Field(gt=0, le=1, description="Share of every 10 ms period each competitor spins (it sleeps the rest)")
    niceness: int = Field(0, ge=0, le=19, description="Nice level of the competitors (19: they only take cycles nobody else wants)")
    contention_start_step: int = Field(0, ge=0, description="The competitors start at the start of this step")


def check_cpu_contention(p: CpuContentionParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    return _rank_ok("contended_rank", p.contended_rank, w) + _step_ok("contention_start_step", p.contention_start_step, w)


# Workloads whose gradients DDP all-reduces during backward (the only ones with an overlap to lose).
OVERLAPPING_WORKLOADS = ("mlp_ddp",)


class ExposedCommunicationParams(_Params):
    exposed_fraction: float = Field(gt=0, le=1, description="Share of the gradient bytes all-reduced after backward instead of during it")


def check_exposed_communication(p: ExposedCommunicationParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    out = _multi_rank(w)
    if w.name not in OVERLAPPING_WORKLOADS:
        out.append(("", f"workload {w.name!r} does not overlap its gradient all-reduce with backward, so there "
                        f"is no overlap to lose (expected one of {', '.join(OVERLAPPING_WORKLOADS)})"))
    return out
class LoadImbalanceParams(_Params):
    heavier_rank: int = Field(ge=0, description="The rank whose batches carry more work")
    work_factor: float = Field(gt=1.0, le=8.0, description="Its batches are this many times as large (longer "
                               "sequences for token batches, more rows for tabular and image batches)")
    from_step: int = Field(0, ge=0, description="First step with the larger batches")


def check_load_imbalance(p: LoadImbalanceParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    return _multi_rank(w) + _rank_ok("heavier_rank", p.heavier_rank, w) + _step_ok("from_step", p.from_step, w)


# --- scale-out (issue 26; harness/recording/faults/scale_out.py) ---------------------------------------


class ScaleOutParams(_Params):
    scaled_world_size: int = Field(ge=3, le=4096, description="Ranks of the scaled job")
    kept_rank: int = Field(ge=0, description="The recorded rank kept whole (a positive case's culprit)")
    kept_at_rank: int = Field(ge=0, description="Its rank in the scaled job (drawn by the case author)")
    copied_rank: int = Field(ge=0, description="The recorded rank whose jittered copies fill every other rank")
    window_first_step: int = Field(ge=0, description="The first profiled step each scaled trace keeps")
    window_steps: int = Field(ge=1, description="How many profiled steps each scaled trace keeps")
    traced_ranks: list[int] | None = Field(None, min_length=1, description="Only these ranks' traces are written "
                                           "(a sampled fleet profile); null: every rank's")
    jitter_seed: int = Field(0, ge=0, description="Seeds the clock skews, process ids and per-rank noise")

    @field_validator("traced_ranks")
    @classmethod
    def _distinct_traced(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (any(r < 0 for r in v) or len(set(v)) != len(v)):
            raise ValueError("expected distinct ranks >= 0")
        return v


def check_scale_out(p: ScaleOutParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    out = _multi_rank(w) + _rank_ok("kept_rank", p.kept_rank, w) + _rank_ok("copied_rank", p.copied_rank, w)
    if p.kept_rank == p.copied_rank:
        out.append(("copied_rank", f"is the kept rank ({p.kept_rank}); copy the other recorded rank"))
    if p.scaled_world_size <= w.world_size:
        out.append(("scaled_world_size", f"{p.scaled_world_size} is not above the recorded {w.world_size} ranks"))
    if p.kept_at_rank >= p.scaled_world_size:
        out.append(("kept_at_rank", f"rank {p.kept_at_rank} is out of range for the scaled {p.scaled_world_size} ranks"))
    for r in p.traced_ranks or []:
        if r >= p.scaled_world_size:
            out.append(("traced_ranks", f"rank {r} is out of range for the scaled {p.scaled_world_size} ranks"))
    if p.traced_ranks is not None and len(p.traced_ranks) >= p.scaled_world_size:
        out.append(("traced_ranks", f"keeps all {p.scaled_world_size} ranks' traces: leave it out instead"))
    profiled = _profiled_steps(w)
    last = p.window_first_step + p.window_steps - 1
    if profiled is not None and (p.window_first_step not in profiled or last not in profiled):
        out.append(("window_first_step", f"steps {p.window_first_step}..{last} are not all profiled "
                                         f"(the profiler records steps {profiled[0]}..{profiled[-1]})"))
    return out


class CostlyProfilingParams(_Params):
    record_python_stacks: bool = Field(True, description="The profiler records each op's Python stack (with_stack)")
    record_allocations: bool = Field(True, description="The profiler records allocator events (profile_memory)")
    record_execution_trace: bool = Field(False, description="An execution trace observer (torch.profiler's "
                                         "execution_trace_observer) also writes every profiled op's inputs to a file")


class WiderNumbersParams(_Params):
    """No knobs: float64 where the workload computes in float32."""


class RecompilingModelParams(_Params):
    graph_compiler: Literal["inductor", "aot_eager", "eager"] = Field(
        "aot_eager", description="torch.compile's backend: inductor needs a C++ compiler; aot_eager and eager do not")


def check_recompiling_model(p: RecompilingModelParams, w: WorkloadSpec) -> list[tuple[str, str]]:
    if w.name != "transformer_lm":
        return [("graph_compiler", f"recompiles only where batch shapes change from step to step (the transformer_lm "
                                   f"workload's padded lengths); workload {w.name!r} keeps one shape")]
    return []
