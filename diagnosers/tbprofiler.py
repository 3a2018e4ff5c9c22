"""``tbprofiler``: the PyTorch TensorBoard profiler plugin's own analysis (PyPI ``torch-tb-profiler``),
run offline on each rank's trace, its recommendations mapped to findings.

For each rank the plugin's ``RunProfileData.parse`` reads the trace (its loader handles ``.gz``), runs
its parsers and ``analyze()``, which produces the recommendations the plugin shows on its overview page.
The adapter reads the same numbers the recommendations come from (``avg_costs``, GPU utilisation) and
applies the plugin's own thresholds, so each finding is exactly one recommendation the plugin made.

Mapping (outside verdict -> taxonomy), each with the plugin's threshold:

==========================================================  ===========================================
plugin recommendation                                       finding
==========================================================  ===========================================
"high time cost on input data loading": DataLoader > 5%     ``input.dataloader_starvation``, cause
of the step                                                 (the plugin advises more loader workers)
"high time cost on communication": communication > 10%     ``symptom.long_collective``, symptom
"GPU ... has low utilization": GPU utilisation < 50%        ``symptom.low_utilization``, symptom
Tensor Cores unused; memory > 90%; DataParallel instead     none: no taxonomy id (shown nowhere)
of DDP; a non-NCCL backend on a GPU
==========================================================  ===========================================

What the plugin sees (0.4.3): its event factory keeps ``user_annotation`` events only for
``ProfilerStep#`` and collectives, and torch 2.x writes the DataLoader wait
(``enumerate(DataLoader)#...__next__``) as a ``user_annotation``; so on torch 2.x traces its DataLoader
share is 0 and the data-loading recommendation never fires. On torch 1.x traces (the wait written as an
operator) it does. The adapter reports what the plugin computes, this included.

Communication is a symptom, not ``comm.collective_stall``: the plugin measures the share of the step
spent in collectives and cannot tell a slow network from peers waiting for a late rank (its advice,
gradient compression or accumulation, is the same for both).

Confidence: the plugin gives advice, never a probability. A cause is claimed at 0.5: the adapter adds
no certainty of its own. Ranks: the ranks on which the recommendation fired; all ranks -> ``None``.

Never claims: ``checkpoint.blocking_save``, ``comm.collective_stall``, ``comm.collective_hang``,
``compute.straggler_rank``, ``compute.load_imbalance``, ``launch.kernel_launch_overhead``,
``host.device_sync``, ``host.cpu_contention`` (the plugin has no rule for them).

Decided here: a trace the plugin cannot parse (truncated file) is left out; with no cause found and a rank
of ``world_size`` unread, the diagnosis abstains. The plugin failing on a readable trace (e.g. a trace
without ``ProfilerStep`` and without its fallbacks) is ``DiagnoserFailed("tbprofiler_error")``.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import logging
import tempfile
from pathlib import Path
from typing import ClassVar

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.base import DiagnoserFailed, installed_version, require_module
from diageval.diagnosis import Abstention, Diagnosis, Finding

INSTALL_HINT = "pip install 'diageval[tbprofiler]'"
CAUSE_CONFIDENCE = 0.5
SYMPTOM_CONFIDENCE = 0.5
# The plugin's thresholds (torch_tb_profiler/profiler/data.py, RunProfileData.analyze), 0.4.3.
DATALOADER_SHARE = 0.05
COMMUNICATION_SHARE = 0.10
GPU_UTILIZATION = 0.5



class TBProfilerDiagnoser:
    """The TensorBoard profiler plugin's recommendations (see the module docstring)."""

    name = "tbprofiler"
    version = f"1+torch-tb-profiler-{installed_version('torch-tb-profiler')}"
    claims: ClassVar[tuple[str, ...]] = ("input.dataloader_starvation",)

    def __init__(self) -> None:
        require_module("torch_tb_profiler.profiler.data", self.name, "torch-tb-profiler", INSTALL_HINT)

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        paths = bundle.trace_paths()
        if not paths:
            return Diagnosis(abstain=Abstention(reason="the bundle has no trace files"))
        fired: dict[str, dict[int, str]] = {}  # category -> rank -> evidence
        unreadable = []
        for rank, path in paths.items():
            if not _readable(path):
                unreadable.append(rank)
                continue
            try:
                shares = _plugin_shares(rank, path)
            except Exception as exc:
                raise DiagnoserFailed("tbprofiler_error", f"rank {rank}: the plugin failed on {path.name}: {type(exc).__name__}: {exc}") from exc
            for category, text in recommendations(shares):
                fired.setdefault(category, {})[rank] = f"rank{rank}/{path.name}: {text}"
        read = [r for r in paths if r not in unreadable]
        findings = [_finding(cat, by_rank, read) for cat, by_rank in fired.items()]
        missing = sorted(set(range(bundle.world_size)) - set(read))
        if missing and not any(f.kind == "cause" for f in findings):
            return Diagnosis(findings=[f for f in findings if f.kind == "symptom"],
                             abstain=Abstention(reason=f"no cause found and ranks {missing} have no readable trace"))
        if not read:
            return Diagnosis(abstain=Abstention(reason="no trace could be read"))
        return Diagnosis(findings=findings)


def recommendations(shares: dict[str, float | None]) -> list[tuple[str, str]]:
    """(taxonomy id, what the plugin said) for the plugin's recommendations that map to the taxonomy."""
    out = []
    if (s := shares.get("dataloader")) is not None and s > DATALOADER_SHARE:
        out.append(("input.dataloader_starvation", f"DataLoader {100 * s:.1f}% of the step (plugin: > 5%: high time cost on input data loading)"))
    if (s := shares.get("communication")) is not None and s > COMMUNICATION_SHARE:
        out.append(("symptom.long_collective", f"communication {100 * s:.1f}% of the step (plugin: > 10%: high time cost on communication)"))
    if (s := shares.get("min_gpu_utilization")) is not None and s < GPU_UTILIZATION:
        out.append(("symptom.low_utilization", f"GPU utilization {100 * s:.1f}% (plugin: < 50%: low utilization)"))
    return out


def _finding(category: str, by_rank: dict[int, str], read: list[int]) -> Finding:
    kind = "symptom" if category.startswith("symptom.") else "cause"
    ranks = None if set(by_rank) == set(read) else sorted(by_rank)
    return Finding(category=category, kind=kind, confidence=CAUSE_CONFIDENCE if kind == "cause" else SYMPTOM_CONFIDENCE,
                   ranks=ranks, summary=f"TensorBoard profiler plugin recommendation on ranks {sorted(by_rank)}",
                   evidence=list(by_rank.values())[:4])


def _readable(path: Path) -> bool:
    try:
        with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as fh:
            json.load(fh)
        return True
    except (OSError, EOFError, ValueError):
        return False


def _plugin_shares(rank: int, path: Path) -> dict[str, float | None]:
    """Run the plugin on one trace; the shares its recommendations test."""
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.event_parser import ProfileRole

    quiet = io.StringIO()
    plugin_logger = logging.getLogger("torch_tb_profiler")
    level = plugin_logger.level
    plugin_logger.setLevel(logging.ERROR)
    try:
        with tempfile.TemporaryDirectory() as cache, contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            data = RunProfileData.parse(f"rank{rank}", "1", str(path), cache)
    finally:
        plugin_logger.setLevel(level)
    costs = data.avg_costs.costs
    total = costs[ProfileRole.Total]
    util = data.gpu_metrics_parser.gpu_utilization if data.gpu_metrics_parser else {}
    gpu_ids = data.gpu_metrics_parser.gpu_ids if data.gpu_metrics_parser else []
    return {
        "dataloader": costs[ProfileRole.DataLoader] / total if total else None,
        "communication": costs[ProfileRole.Communication] / total if total else None,
        "min_gpu_utilization": min((util[g] for g in gpu_ids), default=None),
        "recommendations": len(data.recommendations),
    }
