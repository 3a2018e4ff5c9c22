"""What each rank process runs: join the process group, build the workload, train, record.

The loop is shared by every workload, so they log, checkpoint and are timed the same way::

    t_start -> faults' step hooks -> next batch -> train_step -> [log] -> [checkpoint] -> t_end -> prof.step()

Decided here:

* Step ``N`` of ``steps.jsonl`` is ``ProfilerStep#N`` of the trace: the profiler starts right before
  step 0 and ``prof.step()`` ends each step, after its timer stopped (the last step's ``prof.step()``
  exports the trace, which must not count as step time).
* The profiler starts after ``init_process_group`` and the workload's setup (so ``distributedInfo`` is
  in the trace) and records the last ``trace_steps`` steps after one warm-up step; no python stacks
  (``with_stack`` would name functions), shapes recorded.
* On CUDA each step ends with a stream synchronize, so step times are what the device did, not how far
  the host ran ahead.
* Only rank 0 saves checkpoints (the common data-parallel practice); all ranks log.
* Every job keeps a Flight Recorder buffer (``TORCH_FR_BUFFER_SIZE``, gloo included since torch 2.8) and
  dumps it at exit into ``flight_recorder/rank_<N>`` (torch's pickle format, stacks left out: they name
  files), whether the job succeeded or failed, so the dump's presence says nothing by itself. gloo has no
  watchdog that dumps on timeout as NCCL's does; the worker dumps it itself.
* A job that fails inside a step (a collective timeout) does what a real one leaves behind: the error
  in its log (its message only: the python stack would name the injector's frames), the failing step in the step log (ending when it failed), the profiler trace of
  the steps recorded so far, its Flight Recorder dump; then it exits with ``JOB_FAILED_EXIT`` without
  tearing down the process group (that could wait on the dead peers). The recorder accepts that exit
  only for faults that declare ``fails_job``.
* What every rank imports is imported at this module's top, the workload registry included (its params models,
  13-16 ms a rank when ``run_rank`` imported it), so the forkserver, which preloads this module, holds it.
* The trace is exported as plain JSON into the private scratch folder (whose random path ends up in the
  trace's ``traceName``) and gzipped at level 1 into the bundle (torch's own ``.gz`` export uses level 9,
  half of a recording's time).
"""

from __future__ import annotations

import datetime
import gzip
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule

from diageval.recording.context import RankContext
from diageval.recording.faults.base import Injection
from diageval.recording.plan import RankPlan
from diageval.recording.workloads import WORKLOADS  # here, not in run_rank: the forkserver preloads this module

JOB_FAILED_EXIT = 3  # the job failed in its loop and left its evidence (see the module docstring)
FLIGHT_RECORDER_ENTRIES = "2000"  # collectives kept per rank: every one of a recorded case


def profiler_window(steps: int, trace_steps: int) -> tuple[int, int, int]:
    """(wait, warmup, active) so the profiler records the last ``trace_steps`` steps after a warm-up step."""
    active = max(1, min(trace_steps, steps - 1))
    warmup = 1 if steps - active >= 1 else 0
    wait = steps - active - warmup
    return wait, warmup, active


def _build_faults(plan: RankPlan, ctx: RankContext) -> Injection:
    from diageval.recording.faults import FAULTS

    faults = []
    for name, params in plan.live_faults:
        info = FAULTS[name]
        faults.append(info.load()(info.params_model.model_validate(params), ctx))
    return Injection(faults)


def run_rank(plan: RankPlan) -> None:
    torch.set_num_threads(1)
    use_cuda = plan.device == "cuda"
    if use_cuda:
        torch.cuda.set_device(plan.rank)
    backend = "nccl" if use_cuda else "gloo"
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", FLIGHT_RECORDER_ENTRIES)
    store = dist.FileStore(str(plan.store_path), plan.world_size)
    timeout = {} if plan.collective_timeout_s is None else {"timeout": datetime.timedelta(seconds=plan.collective_timeout_s)}
    dist.init_process_group(backend, store=store, rank=plan.rank, world_size=plan.world_size, **timeout)
    ctx = RankContext(
        rank=plan.rank, world_size=plan.world_size, steps=plan.steps,
        device=f"cuda:{plan.rank}" if use_cuda else "cpu", backend=backend, scratch_dir=plan.scratch_dir,
    )
    monitor = None  # an in-job monitor, installed before the workload and the injectors exist (monitors/hooks.py)
    if plan.monitor is not None:
        from diageval.recording.monitors.hooks import install_monitor

        monitor = install_monitor(plan.monitor, rank=ctx.rank, world_size=ctx.world_size, device=ctx.device,
                                  bundle_dir=plan.bundle_dir)
    info = WORKLOADS[plan.workload]
    params = info.params_model.model_validate(plan.workload_params)
    injection = _build_faults(plan, ctx)
    setup = info.load()(params, ctx, injection)
    n_params = sum(p.numel() for p in setup.state_dict()["model"].values())
    print(f"rank {ctx.rank}/{ctx.world_size} on {ctx.device} ({backend}): {plan.steps} steps, "
          f"{n_params / 1e6:.2f}M parameters, batch {params.batch_size}")
    batches = iter(setup.loader)
    dist.barrier()
    injection.after_setup()

    raw_trace = plan.scratch_dir / f"rank{ctx.rank}.json"
    wait, warmup, active = profiler_window(plan.steps, params.trace_steps)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if use_cuda else [])
    prof = profile(
        activities=activities,
        schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(raw_trace)),
        **{"record_shapes": True, "with_stack": False, **injection.profiler_options()},
    )
    rows = []
    checkpoint_path = plan.scratch_dir / f"checkpoint-rank{ctx.rank}.pt"
    prof.start()
    failed_step: int | None = None
    try:
        for step in range(plan.steps):
            t_start = time.time()
            if monitor is not None:
                monitor.step_start(step)
            try:
                injection.on_step_start(step)
                if monitor is not None:
                    monitor.batch_requested(step)
                batch = next(batches)
                if monitor is not None:
                    monitor.batch_ready(step)
                loss = setup.train_step(batch)
            except Exception:
                rows.append({"rank": ctx.rank, "step": step, "t_start": t_start, "t_end": time.time()})
                failed_step = step
                raise
            if step % params.log_every == 0 or step == plan.steps - 1:
                print(f"step {step} loss {loss.item():.4f}")
            if ctx.rank == 0 and ((step + 1) % params.checkpoint_every == 0 or injection.checkpoint_due(step)):
                started = time.perf_counter()
                with open(checkpoint_path, "wb") as fh:
                    torch.save(setup.state_dict(), injection.checkpoint_file(fh, step))
                print(f"saved checkpoint in {time.perf_counter() - started:.2f}s")
            if use_cuda:
                torch.cuda.current_stream().synchronize()
            t_end = time.time()
            rows.append({"rank": ctx.rank, "step": step, "t_start": t_start, "t_end": t_end})
            if monitor is not None:
                monitor.step_end(step)
            prof.step()
    except Exception as exc:
        if failed_step is None:  # failed outside the step (logging, checkpointing): not a job failure we model
            raise
        # The error itself, not the python stack: the stack would name the injector's frames.
        print(f"step {failed_step} failed: {''.join(traceback.format_exception_only(exc)).strip()}", file=sys.stderr)
    prof.stop()
    if monitor is not None:
        monitor.finish(failed=failed_step is not None)
    _dump_flight_recorder(plan.bundle_dir / "flight_recorder" / f"rank_{ctx.rank}", backend)
    if failed_step is not None:
        del batches  # stop the DataLoader workers before the hard exit
        _write_evidence(plan, ctx.rank, rows, raw_trace, required=False)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(JOB_FAILED_EXIT)  # no teardown: destroying the group could wait on the dead peers
    print("training done")
    del batches
    dist.barrier()
    dist.destroy_process_group()
    _write_evidence(plan, ctx.rank, rows, raw_trace, required=True)


def _dump_flight_recorder(path: Path, backend: str) -> None:
    """This rank's Flight Recorder buffer in torch's dump format (what ``fr_trace`` reads), without stacks.

    gloo's recorder is dumped by ``_dump_fr_trace``; NCCL keeps its own, dumped by ``_dump_nccl_trace``
    (CUDA builds only; not yet run on a GPU here).
    """
    from torch._C import _distributed_c10d as c10d

    dump = getattr(c10d, "_dump_nccl_trace" if backend == "nccl" else "_dump_fr_trace", None)
    if dump is None:  # torch before 2.8 (no Flight Recorder on gloo), or a build without NCCL
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(dump(True, False, False))  # includeCollectives, includeStackTraces, onlyActive


def _write_evidence(plan: RankPlan, rank: int, rows: list[dict], raw_trace: Path, *, required: bool) -> None:
    """The step log into scratch and the gzipped trace into the bundle; a failed job may have no trace."""
    (plan.scratch_dir / f"steps.rank{rank}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if not raw_trace.is_file():
        if not required:
            return
        raise RuntimeError(f"the profiler wrote no trace to {raw_trace}")
    out = plan.bundle_dir / f"rank{rank}" / "trace.json.gz"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(raw_trace, "rb") as src, gzip.open(out, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.unlink(raw_trace)
