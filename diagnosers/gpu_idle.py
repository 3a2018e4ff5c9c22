"""``gpu-idle``: the ``gpu-idle`` analyser (PyPI ``gpu-idle``, one module named ``analyzer``) run on each
rank's trace, its findings mapped to the taxonomy.

``analyzer.analyze(path)`` reads one uncompressed Chrome trace and returns ranked findings, each with a
cause, a confidence, evidence and an impact; an empty list means the GPU is busy enough (>= 80%).
It reads plain JSON only, so each ``trace.json.gz`` is decompressed into a temporary file first.

Mapping (outside verdict -> taxonomy):

=====================  ==================================  =============================================
gpu-idle ``cause``     finding                             confidence
=====================  ==================================  =============================================
``dataloader``         ``input.dataloader_starvation``,    gpu-idle's own (DataLoader share of the window)
                       cause
``smallbatch``         ``launch.kernel_launch_overhead``,  gpu-idle's own (25 us / mean kernel time)
                       cause (kernels too short to fill
                       the device: per-launch overhead)
``h2d_copy``           none (no taxonomy id for host-to-device copies); shown nowhere
``unattributed``       ``symptom.low_utilization``,        gpu-idle's own (0.3)
                       symptom
=====================  ==================================  =============================================

Ranks: the ranks on whose trace the cause was found (all ranks -> ``None``); confidence the highest over
them; ``impact`` is not given (gpu-idle states it as text, "up to 2.9x faster").

Never claims: ``checkpoint.blocking_save``, ``comm.collective_stall``, ``comm.collective_hang``,
``compute.straggler_rank``, ``compute.load_imbalance``, ``host.device_sync`` (it requires a measured
stall and has no rule naming syncs), ``host.cpu_contention``.

Decided here:

* gpu-idle measures GPU busy time. On a trace without GPU kernels (a CPU-only job, or torch 1.x traces
  whose kernels are categorised ``Kernel``, which it does not read) its busy share is 0 and it would name
  ``smallbatch`` with confidence 1 on every trace. That is outside what it was built for: such a rank is
  left out, and a bundle with no rank in its domain is an abstention that says so.
* A trace without ``ProfilerStep`` annotations (gpu-idle raises ``ValueError``) or one that cannot be read
  is left out the same way. Any other exception is ``DiagnoserFailed("gpu_idle_error")``.
* gpu-idle's every threshold was measured on A100 traces (its own docstring: "Every threshold here was set
  from measured A100 traces"; its smallbatch evidence reads "far too short to fill an A100"): 80% busy as
  healthy, 25 us as a small kernel. Those numbers do not carry to another device (a kernel "too short" for an
  A100's 108 SMs fills a smaller GPU; an MI250 launches through ``hipLaunchKernel``, which gpu-idle does not
  read). So a rank is judged only when its trace's ``deviceProperties`` name an A100; a trace on another
  device, or one that does not name its device, is left out with that reason (an abstention when no rank is
  left), rather than judged against a device it was not on.
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
from pathlib import Path
from typing import Any, ClassVar

from diageval.bundle.kineto import KERNEL_CATEGORIES
from diageval.bundle.model import EvidenceBundle
from diageval.bundle.trace_stream import StreamState, TraceFormatError, iter_trace_events
from diageval.diagnosers.base import DiagnoserFailed, DiagnoserUnavailable, installed_version
from diageval.diagnosis import Abstention, Diagnosis, Finding

INSTALL_HINT = "pip install 'diageval[gpu-idle]'"
MAPPING = {"dataloader": "input.dataloader_starvation", "smallbatch": "launch.kernel_launch_overhead",
           "unattributed": "symptom.low_utilization"}
NO_KERNELS = "no GPU kernels in the trace (gpu-idle measures GPU busy time)"
CALIBRATED_DEVICE = "A100"  # the device every gpu-idle threshold was measured on (see the module docstring)


def trace_devices(path: Path) -> tuple[list[str], int]:
    """The device names a trace's ``deviceProperties`` give (empty when it names none), and its kernel count."""
    state = StreamState()
    kernels = sum(1 for ev in iter_trace_events(path, state) if ev.ph == "X" and ev.cat in KERNEL_CATEGORIES)
    props = state.header.get("deviceProperties")
    names = [d["name"] for d in props if isinstance(d, dict) and isinstance(d.get("name"), str)] if isinstance(props, list) else []
    return names, kernels


def outside_calibration(devices: list[str]) -> str | None:
    """Why gpu-idle's A100 thresholds do not apply to a trace on ``devices``, or None when they do."""
    if not devices:
        return (f"the trace names no device (no deviceProperties), so gpu-idle's thresholds, all measured on"
                f" {CALIBRATED_DEVICE} traces, cannot be checked to apply")
    if any(CALIBRATED_DEVICE in name for name in devices):
        return None
    return (f"the trace is from {devices[0]}; gpu-idle's thresholds (80% busy is healthy, kernels under 25 us are"
            f" 'small') were all measured on {CALIBRATED_DEVICE} traces and do not carry to another device")



def _load_analyzer() -> Any:
    import analyzer  # gpu-idle's one module

    if not (callable(getattr(analyzer, "analyze", None)) and callable(getattr(analyzer, "measure", None))):
        raise ImportError("the module 'analyzer' found is not gpu-idle's (no analyze/measure)")
    return analyzer


class GpuIdleDiagnoser:
    """gpu-idle's verdicts per rank (see the module docstring)."""

    name = "gpu-idle"
    version = f"2+gpu-idle-{installed_version('gpu-idle')}"
    claims: ClassVar[tuple[str, ...]] = ("input.dataloader_starvation", "launch.kernel_launch_overhead")

    def __init__(self) -> None:
        if installed_version("gpu-idle") == "missing":
            raise DiagnoserUnavailable(f"the gpu-idle diagnoser needs the gpu-idle package; install it with: {INSTALL_HINT}")
        try:
            self._analyzer = _load_analyzer()
        except ImportError as exc:
            raise DiagnoserUnavailable(f"gpu-idle cannot be imported ({exc}); install it with: {INSTALL_HINT}") from exc

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        paths = bundle.trace_paths()
        if not paths:
            return Diagnosis(abstain=Abstention(reason="the bundle has no trace files"))
        results: dict[int, list[dict]] = {}
        skipped: dict[int, str] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for rank, path in paths.items():
                outcome = self._analyse_rank(rank, path, Path(tmp))
                if isinstance(outcome, str):
                    skipped[rank] = outcome
                else:
                    results[rank] = outcome
        if not results:
            reasons = "; ".join(f"rank {r}: {why}" for r, why in skipped.items())
            return Diagnosis(abstain=Abstention(reason=f"no trace gpu-idle can judge ({reasons})"))
        findings = merge_findings(results)
        missing = sorted(set(range(bundle.world_size)) - set(results))
        if missing and not any(f.kind == "cause" for f in findings):
            return Diagnosis(findings=findings, abstain=Abstention(reason=f"no cause found and ranks {missing} could not be judged"))
        return Diagnosis(findings=findings)

    def _analyse_rank(self, rank: int, path: Path, tmp: Path) -> list[dict] | str:
        """gpu-idle's findings for one trace, or why the trace is outside what it can judge."""
        plain = tmp / f"rank{rank}.json"
        try:
            with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as src, open(plain, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            devices, kernels = trace_devices(plain)
            if not kernels:
                return NO_KERNELS
            outside = outside_calibration(devices)
            if outside is not None:
                return outside
            result = self._analyzer.analyze(plain)
        except (OSError, EOFError, TraceFormatError, UnicodeDecodeError) as exc:
            return f"unreadable ({type(exc).__name__})"
        except ValueError as exc:  # gpu-idle: no ProfilerStep annotations; or JSON cut short
            return f"gpu-idle: {str(exc).replace(str(plain) + ': ', '').splitlines()[0][:160]}"
        except Exception as exc:
            raise DiagnoserFailed("gpu_idle_error", f"rank {rank}: gpu-idle failed: {type(exc).__name__}: {exc}") from exc
        if result["measurements"]["n_kernels"] == 0:
            return NO_KERNELS
        return result["findings"]


def merge_findings(results: dict[int, list[dict]]) -> list[Finding]:
    """gpu-idle's per-rank findings -> one finding per taxonomy id (ranks where found, highest confidence)."""
    by_category: dict[str, list[tuple[int, dict]]] = {}
    for rank, found in results.items():
        for f in found:
            category = MAPPING.get(f.get("cause"))
            if category:
                by_category.setdefault(category, []).append((rank, f))
    out = []
    for category, hits in by_category.items():
        ranks = sorted({r for r, _ in hits})
        out.append(Finding(
            category=category, kind="symptom" if category.startswith("symptom.") else "cause",
            confidence=max(min(1.0, float(f["confidence"])) for _, f in hits),
            ranks=None if set(ranks) == set(results) else ranks,
            summary=f"gpu-idle: {hits[0][1]['cause']} on ranks {ranks}",
            evidence=[f"rank{r}/trace.json.gz: {f.get('evidence', '')}" for r, f in hits[:4]],
        ))
    return out
