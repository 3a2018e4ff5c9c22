"""Record one case into an evidence bundle folder: ``record_case(case, dest)``.

The parent resolves the device, splits the case's faults into live ones (handed to the ranks by
registry name) and evidence ones (applied here to the finished folder), starts the ranks through the
launcher while sampling host metrics, and publishes the bundle atomically. The case id is used only in
error messages; nothing that names the case or its faults reaches the ranks' output or the bundle
(the ranks get fault registry names only to look the injector up, and never print them).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from diageval.bundle.model import BundleManifest
from diageval.cases.model import Case
from diageval.fileio import owned_temp_dir, remove_stale_temp_dirs
from diageval.recording.launcher import RecordingError, run_ranks
from diageval.recording.plan import RankPlan

DEFAULT_TIMEOUT_S = 180.0
TMP_PREFIX = ".tmp-"  # the bundle being written, beside its final place in the cache
SCRATCH_PREFIX = "diageval-rec-"  # the ranks' rendezvous store and step logs


def resolve_device(requested: str, case: Case) -> str:
    """``auto`` -> ``cuda`` when there is one CUDA device per rank and every live fault works on NCCL,
    else ``cpu`` (a case that ``requires: {device: cuda}`` is never recorded on CPU). When the case cannot
    be recorded on the device asked for, raises RecordingError saying why (:func:`device_problem`)."""
    problem = device_problem(requested, case)
    if problem:
        raise RecordingError(f"case {case.id}: {problem}")
    if requested == "cpu":
        return "cpu"
    if requested == "cuda" or case.requires.device == "cuda":
        return "cuda"
    return "cuda" if cuda_device_count() >= case.workload.world_size and not _gloo_only(case) else "cpu"


def device_problem(requested: str, case: Case) -> str | None:
    """Why ``case`` cannot be recorded on ``requested`` (auto, cpu or cuda) on this machine; None if it can.

    The run pipeline, ``diageval verify`` and ``diageval record`` list such cases as skipped with this reason.
    """
    if requested not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {requested!r}")
    needs_cuda = case.requires.device == "cuda"
    if requested == "cpu":
        return "needs CUDA (requires: {device: cuda}); --device cpu" if needs_cuda else None
    if requested == "auto" and not needs_cuda:
        return None
    need = max(case.workload.world_size, case.requires.min_devices if needs_cuda else 1)
    have = cuda_device_count()
    if have < need:
        why = "needs CUDA (requires: {device: cuda})" if needs_cuda else "--device cuda"
        return f"{why}: {need} CUDA device(s) needed, this machine has {have}"
    gloo_only = _gloo_only(case)
    if gloo_only:
        return f"its injection ({', '.join(gloo_only)}) works on CPU (gloo) only; use --device cpu or auto"
    return None


GPU_DRIVER_NODES = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/kfd", "/dev/dxg")
"""What a Linux machine shows when torch can see a GPU: the NVIDIA driver (in containers too), ROCm's kernel
driver, WSL2's GPU paravirtualisation."""


def cuda_device_count() -> int:
    """CUDA devices torch sees. On Linux without any GPU driver node that is 0, said without importing torch
    (seconds on 2 cores, in every run of a corpus that holds CUDA cases, even when every bundle is cached)."""
    if sys.platform.startswith("linux") and not any(Path(p).exists() for p in GPU_DRIVER_NODES):
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _gloo_only(case: Case) -> list[str]:
    from diageval.recording.faults import FAULTS

    return [f.name for f in case.faults if "nccl" not in getattr(FAULTS[f.name].load(), "backends", ("nccl",))]


def record_case(case: Case, dest: Path, *, device: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S,
                monitor: str | None = None) -> BundleManifest:
    """Run ``case`` live and write its bundle to ``dest`` (replaced if it exists). Raises RecordingError.
    ``monitor``: an in-job monitor to install in every rank (:mod:`diageval.recording.monitors`)."""
    from diageval.recording.bundle_writer import bundle_env, finish_bundle, merge_step_logs
    from diageval.recording.faults import FAULTS
    from diageval.recording.metrics import MetricsSampler
    from diageval.recording.rank_worker import JOB_FAILED_EXIT, run_rank

    device = resolve_device(device, case)
    live: list[tuple[str, dict]] = []
    bundle_faults = []
    timeouts: list[float] = []  # a fault may shorten the job's collective timeout (the hang cases)
    accepted = {0}
    for spec in case.faults:
        info = FAULTS[spec.name]
        params = info.params_model.model_validate(spec.params)
        impl = info.load()
        if impl.stage == "bundle":
            bundle_faults.append(impl(params))
        else:
            live.append((spec.name, params.model_dump()))
            if getattr(params, "collective_timeout_s", None) is not None:
                timeouts.append(params.collective_timeout_s)
            if getattr(impl, "fails_job", False):
                accepted.add(JOB_FAILED_EXIT)

    dest = Path(dest)
    # a recording killed with SIGKILL leaves its temp folders; the next one removes those whose owner is dead
    remove_stale_temp_dirs(dest.parent, TMP_PREFIX)
    remove_stale_temp_dirs(Path(tempfile.gettempdir()), SCRATCH_PREFIX)
    tmp_dir = owned_temp_dir(dest.parent, TMP_PREFIX)
    scratch = owned_temp_dir(Path(tempfile.gettempdir()), SCRATCH_PREFIX)
    world = case.workload.world_size
    plans = [
        RankPlan(rank=r, world_size=world, steps=case.workload.steps, device=device, workload=case.workload.name,
                 workload_params=case.workload.params, live_faults=live, store_path=scratch / "store",
                 bundle_dir=tmp_dir, scratch_dir=scratch, collective_timeout_s=min(timeouts) if timeouts else None,
                 monitor=monitor)
        for r in range(world)
    ]
    sampler = MetricsSampler()
    published = False
    try:
        try:
            run_ranks(run_rank, [(p,) for p in plans], [tmp_dir / "logs" / f"rank{r}.log" for r in range(world)],
                      timeout_s=timeout_s, what=f"case {case.id}", on_started=sampler.start,
                      accepted_exit_codes=frozenset(accepted))
        finally:
            metrics = sampler.stop()
        manifest = finish_bundle(
            tmp_dir, dest, steps=merge_step_logs(scratch, world), metrics=metrics,
            env=bundle_env(device, world, "nccl" if device == "cuda" else "gloo"), bundle_faults=bundle_faults,
        )
        published = True
        return manifest
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if not published:
            shutil.rmtree(tmp_dir, ignore_errors=True)
