"""``hta``: an adapter to Meta's HolisticTraceAnalysis (PyPI ``traceinsight``, import name ``hta``).

Size: one module because every function here wraps one HTA call or works around one of its quirks; the
threshold logic, which is what a reader reviews, is apart in :mod:`diageval.diagnosers.hta_mapping`.

It runs the HTA analyses that apply to a bundle's traces and turns their numbers into findings through
:mod:`diageval.diagnosers.hta_mapping` (which holds every threshold and its rationale).

Which analyses run (decided from the parsed traces before calling HTA, so an analysis is never run on
input it cannot handle):

=========================================  ====================================================
analysis (HTA ``TraceAnalysis`` method)    runs when
=========================================  ====================================================
``get_temporal_breakdown``                 some rank has GPU kernels
``get_idle_time_breakdown``                some rank has GPU kernels (ranks with kernels)
``get_cuda_kernel_launch_stats``           some rank has GPU kernels (ranks with kernels)
``get_queue_length_summary``               some rank has GPU kernels (evidence only)
``get_gpu_kernel_breakdown``               some rank has GPU kernels
``get_comm_comp_overlap``                  communication kernels exist (evidence only)
``get_potential_stragglers``               every rank of the job has a trace with communication
                                           kernels HTA's straggler code knows (``ncclKernel*``),
                                           and ProfilerSteps
critical path (``data_load_events``)       a rank has DataLoader events (up to 4 ranks, the lowest) and
                                           launches HTA can link (``hta_prechecks``)
=========================================  ====================================================

On CPU-only traces (gloo, no kernels) only the critical path applies, and stock HTA cannot build it
(it asserts a CUDA launch-queue time series exists), so :class:`_KernelOptionalCPGraph` skips the kernel
part of the graph on ranks without GPU events. The critical path window is given as timestamps (first
``ProfilerStep`` start to last ``ProfilerStep`` end on the rank's CPU, else the whole trace) instead of
HTA's annotation instance positions, which in traceinsight 0.6.1 mix CPU and GPU annotations and yield
NaN windows; the clipping otherwise mirrors ``CriticalPathAnalysis.critical_path_analysis``.

Decisions where the design is silent:

* HTA is given ``{rank: path}`` directly (its ``trace_files`` argument) rather than a staged folder: the
  bundle's ``rank<N>/`` folders are the truth about ranks, so HTA's regex on the file content (which
  compact JSON defeats) is never needed, and nothing is copied or decompressed.
* Traces are parsed in-process (``use_multiprocessing=False``): HTA's fork pool inside a worker that may
  hold threads is a hang risk, and bundles have few ranks. ``include_last_profiler_step=True``: a bundle's
  trace window ends with a complete step (HTA's default drops it as possibly truncated).
* HTA's logging, prints and warnings are silenced while it runs (see :func:`_quiet_hta`); its failures surface as
  ``DiagnoserFailed("hta_error", ...)`` naming the analysis and rank. Any applicable analysis that raises
  fails the whole diagnosis (a partial answer would hide that HTA broke).
* No applicable analysis (no kernels, no data-loading events): an abstention with the reason.
* Incomplete evidence: unreadable trace files (truncated gzip or JSON) are left out and the rest analysed;
  when no cause is found and some rank of ``world_size`` has no readable trace, the diagnosis abstains
  (the culprit may be the missing rank) rather than implying a healthy run. Symptoms are kept.
* The straggler metric is a ranking: HTA names its top-k ranks whether or not anyone is late. It becomes a
  finding only through :func:`hta_mapping.straggler_finding`'s thresholds (lateness, consistency, at
  least ``STRAGGLER_MIN_ITERATIONS``), and only when every rank of the job was traced (the latest of a
  sample of ranks may itself wait for an unsampled one). HTA's straggler code selects communication
  kernels by the prefix ``ncclKernel``: on traces whose communication kernels are named otherwise
  (``ncclDevKernel_*`` from NCCL 2.19 on, RCCL, DeepEP) it is not applicable and is not run.
* HTA's known crashes are checked before it runs (:mod:`diageval.diagnosers.hta_prechecks`): a rank whose
  trace HTA's loader would crash on (correlation ids that overflow their downcast column: ROCm traces under
  pandas 3) is left out like an unreadable trace, the critical path is not run on a rank whose launches it
  cannot link (legacy ``Runtime`` categories), and the GPU breakdowns are not run when HTA's rounding gives a
  device event a negative duration. When no cause is found and a check left a question unanswered (a rank
  out, the GPU or data-loading questions), the diagnosis abstains with the reason.
* Private HTA API used, pinned to traceinsight 0.6.x: ``CPGraph`` (subclassed), and the straggler metric
  ``_compute_normalized_start_time_of_significant_comm_kernels`` (called through the public
  ``straggler_identification_impl`` hook of ``get_potential_stragglers``), because the public method
  returns only the top-k ranks with no magnitude to threshold.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import logging
import re
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pandas as pd

from diageval.bundle.kineto import PROFILER_STEP
from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers import hta_mapping as mapping
from diageval.diagnosers.base import DiagnoserFailed, installed_version, require_module
from diageval.diagnosers.hta_prechecks import (
    critical_path_blocker,
    gpu_analyses_blocker,
    loader_blocker,
    memory_blocker,
    rank_count_blocker,
)
from diageval.diagnosis import Abstention, Diagnosis, Finding

INSTALL_HINT = "pip install 'diageval[hta]'"
DATA_LOAD_EVENTS = ["DataLoader"]  # regexes HTA's critical path counts as data loading
MAX_CRITICAL_PATH_RANKS = 4  # critical path costs ~0.3-3 s per rank; starvation shows on every rank
T = TypeVar("T")



@dataclass
class _RankFacts:
    rank: int
    gpu_kernels: int
    comm_kernels: int
    data_load_events: int  # CPU events matching DATA_LOAD_EVENTS, with a duration
    straggler_kernels: int = 0  # communication kernels HTA's straggler code selects (``ncclKernel*``)


STRAGGLER_KERNEL_PREFIX = "ncclKernel"  # what hta.analyzers.straggler selects (traceinsight 0.6.1)


class HTADiagnoser:
    """Findings from HolisticTraceAnalysis' own analyses (see the module docstring for which and when)."""

    name = "hta"
    version = f"2+traceinsight-{installed_version('traceinsight')}"
    # what hta_mapping can name as a cause; long or exposed communication is only ever a symptom
    claims = ("input.dataloader_starvation", "launch.kernel_launch_overhead", "compute.straggler_rank")

    def __init__(self) -> None:
        require_module("hta.trace_analysis", self.name, "HolisticTraceAnalysis (traceinsight)", INSTALL_HINT)

    def diagnose(self, bundle: EvidenceBundle) -> Diagnosis:
        paths = {r: str(p) for r, p in bundle.trace_paths().items()}
        if not paths:
            return Diagnosis(abstain=Abstention(reason="the bundle has no trace files for HTA to analyse"))
        if (too_large := rank_count_blocker(paths) or memory_blocker(paths)) is not None:
            return Diagnosis(abstain=Abstention(reason=too_large))
        blocked = {r: f"not analysable by HTA ({why})" for r, p in paths.items() if (why := loader_blocker(p)) is not None}
        paths = {r: p for r, p in paths.items() if r not in blocked}
        if not paths:
            return Diagnosis(abstain=Abstention(reason=f"HTA cannot analyse any trace: {_describe(blocked)}"))
        unreadable: dict[int, str] = dict(blocked)
        with _quiet_hta():
            try:
                trace = _load_trace(paths)
            except Exception as exc:
                bad = {r: f"unreadable ({why})" for r, why in _unreadable_traces(paths).items()}
                if not bad:  # the files are fine: HTA itself broke
                    raise _hta_failure("loading the traces", None, exc) from exc
                unreadable.update(bad)
                paths = {r: p for r, p in paths.items() if r not in unreadable}
                if not paths:
                    return Diagnosis(abstain=Abstention(reason=f"no readable trace: {_describe(unreadable)}"))
                trace = _step("loading the readable traces", None, lambda: _load_trace(paths))
            diagnosis, unanswered = _analyse(trace, bundle.world_size)
        return _abstain_if_incomplete(diagnosis, bundle.world_size, set(paths), unreadable, unanswered)


def _unreadable_traces(paths: dict[int, str]) -> dict[int, str]:
    """Rank -> why its trace file cannot be read as JSON (truncated gzip, cut-off JSON...)."""
    bad = {}
    for rank, path in paths.items():
        try:
            with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as fh:
                json.load(fh)
        except (OSError, EOFError, ValueError) as exc:
            bad[rank] = f"{type(exc).__name__}: {str(exc)[:120]}"
    return bad


def _describe(unreadable: dict[int, str]) -> str:
    return "; ".join(f"rank{r}/trace.json.gz {why}" for r, why in sorted(unreadable.items()))


def _abstain_if_incomplete(diagnosis: Diagnosis, world_size: int, analysed: set[int], unreadable: dict[int, str],
                           unanswered: list[str] | None = None) -> Diagnosis:
    """No cause found while some ranks' traces are missing or unreadable, or a question HTA would have answered
    was left out (``unanswered``): the culprit may be there, so say the evidence is insufficient instead of
    implying a healthy run (symptoms stay)."""
    if diagnosis.abstain is not None or diagnosis.causes:
        return diagnosis
    missing = sorted(set(range(world_size)) - analysed - set(unreadable))
    if not missing and not unreadable and not unanswered:
        return diagnosis
    parts = []
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        parts.append(f"no trace for rank(s) {shown} of {world_size}")
    if unreadable:
        parts.append(_describe(unreadable))
    parts += unanswered or []
    return Diagnosis(
        findings=diagnosis.findings,
        abstain=Abstention(reason=f"HTA found no cause in the traces it could read, but {'; '.join(parts)}"),
    )


# --- running HTA -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _quiet_hta() -> Iterator[None]:
    """Silence HTA for the duration, and leave logging as it was.

    HTA logs through its ``hta`` logger and also through the root logger's module functions
    (``logging.info(...)`` in its critical path), which call ``basicConfig`` -- adding a stderr handler
    to the process' root logger for good -- when the root has no handler. So: logging is disabled while
    HTA runs, a NullHandler keeps the root "configured" meanwhile, and both are undone after; HTA's
    prints (``CPGraph.summary``) and warnings (pandas deprecations) are swallowed too.
    """
    root = logging.getLogger()
    guard = logging.NullHandler() if not root.handlers else None
    if guard is not None:
        root.addHandler(guard)
    disabled_before = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(disabled_before)
        if guard is not None:
            root.removeHandler(guard)


def _step(what: str, rank: int | None, fn: Callable[[], T]) -> T:
    """Run one HTA call; anything it raises becomes ``DiagnoserFailed('hta_error', ...)`` naming the step."""
    try:
        return fn()
    except DiagnoserFailed:
        raise
    except Exception as exc:
        raise _hta_failure(what, rank, exc) from exc


def _hta_failure(what: str, rank: int | None, exc: BaseException) -> DiagnoserFailed:
    where = f" on rank {rank}" if rank is not None else ""
    message = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    if not message and exc.__traceback__ is not None:  # a bare assert: say where it fired
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        message = f"at {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} ({(frame.line or '').strip()})"
    return DiagnoserFailed("hta_error", f"HTA failed {what}{where}: {type(exc).__name__}: {message}")


def _load_trace(trace_files: dict[int, str]) -> Any:
    from hta.common.trace import Trace

    t = Trace(trace_files=trace_files, trace_dir=".")
    t.load_traces(include_last_profiler_step=True, use_multiprocessing=False, use_memory_profiling=False)
    return t


def _analysis(t: Any) -> Any:
    """A ``TraceAnalysis`` over an already loaded ``Trace`` (its constructor would parse again, with a pool)."""
    from hta.trace_analysis import TraceAnalysis

    ta = TraceAnalysis.__new__(TraceAnalysis)
    ta.t = t
    return ta


def _rank_facts(t: Any) -> list[_RankFacts]:
    from hta.utils.utils import is_comm_kernel

    table = t.symbol_table.get_sym_table()
    data_load_ids = [i for i, s in enumerate(table) if any(re.search(p, s) for p in DATA_LOAD_EVENTS)]
    facts = []
    for rank, df in sorted(t.get_all_traces().items()):
        gpu = df[df["stream"] >= 0]
        comm_ids = [int(i) for i in gpu["name"].unique() if 0 <= i < len(table) and is_comm_kernel(table[i])]
        straggler_ids = [i for i in comm_ids if table[i].startswith(STRAGGLER_KERNEL_PREFIX)]
        cpu = df[(df["stream"] < 0) & (df["dur"] > 0)]
        facts.append(_RankFacts(
            rank=int(rank),
            gpu_kernels=int(len(gpu)),
            comm_kernels=int(gpu["name"].isin(comm_ids).sum()),
            data_load_events=int(cpu["name"].isin(data_load_ids).sum()),
            straggler_kernels=int(gpu["name"].isin(straggler_ids).sum()),
        ))
    return facts


def _analyse(t: Any, world_size: int) -> tuple[Diagnosis, list[str]]:
    """HTA's findings, and the questions a pre-check kept it from answering."""
    facts = _rank_facts(t)
    if not facts:
        return Diagnosis(abstain=Abstention(reason="HTA found no analysable events in any rank's trace")), []
    ta = _analysis(t)
    gpu_ranks = [f.rank for f in facts if f.gpu_kernels]
    comm_ranks = [f.rank for f in facts if f.comm_kernels]
    loading_ranks = [f.rank for f in facts if f.data_load_events]
    findings: list[Finding | None] = []

    unanswered = []
    cut_short = {r: why for r in gpu_ranks if (why := gpu_analyses_blocker(t, r)) is not None}
    if cut_short:  # HTA's breakdowns run over every rank at once: one such rank stops them all
        unanswered += [f"rank {r}: HTA's GPU analyses were not run: {why}" for r, why in sorted(cut_short.items())]
    elif gpu_ranks:
        findings += _gpu_findings(ta, gpu_ranks, comm_ranks)
    straggler_ranks = {f.rank for f in facts if f.straggler_kernels}
    if len(straggler_ranks) >= 2 and straggler_ranks == set(range(world_size)):
        steps = _step("listing profiler steps", None, ta.get_profiler_steps)
        if steps:
            findings.append(_straggler(ta))
    if loading_ranks:
        chosen = loading_ranks[:MAX_CRITICAL_PATH_RANKS]
        blocked = {r: why for r in chosen if (why := critical_path_blocker(t, r)) is not None}
        unanswered += [f"rank {r}: the data-loading question (HTA's critical path) was not asked: {why}"
                       for r, why in sorted(blocked.items())]
        summaries = [_critical_path(t, r) for r in chosen if r not in blocked]
        findings.append(mapping.dataloader_finding([s for s in summaries if s is not None]))

    if not gpu_ranks and not loading_ranks:
        return Diagnosis(abstain=Abstention(
            reason="no HTA analysis applies: the traces hold no GPU kernels (HTA's analyses are about GPU time) "
            "and no data-loading events (the one question its critical path answers on CPU traces)"
        )), []
    return Diagnosis(findings=[f for f in findings if f is not None]), unanswered


def _gpu_findings(ta: Any, gpu_ranks: list[int], comm_ranks: list[int]) -> list[Finding | None]:
    temporal = _step("computing the temporal breakdown", None, lambda: ta.get_temporal_breakdown(visualize=False))
    idle, _ = _step(
        "computing the idle time breakdown", None,
        lambda: ta.get_idle_time_breakdown(ranks=gpu_ranks, visualize=False, show_idle_interval_stats=False),
    )
    launch = _step(
        "computing kernel launch stats", None,
        lambda: ta.get_cuda_kernel_launch_stats(ranks=gpu_ranks, visualize=False),
    )
    queue = _step("summarising queue lengths", None, lambda: ta.get_queue_length_summary(ranks=gpu_ranks))
    kernel_types, _ = _step("computing the kernel breakdown", None, lambda: ta.get_gpu_kernel_breakdown(visualize=False))
    overlap = (
        _step("computing comm/comp overlap", None, lambda: ta.get_comm_comp_overlap(visualize=False))
        if comm_ranks else None
    )

    evidence = [mapping.launch_evidence(r, launch[r], temporal, idle) for r in gpu_ranks if r in launch]
    launch_finding = mapping.launch_overhead_finding([e for e in evidence if e is not None])
    if launch_finding is not None and queue is not None:
        launch_finding.evidence.extend(_queue_lines(queue))
    return [
        launch_finding,
        mapping.low_utilization_symptom(temporal),
        mapping.long_collective_symptom(kernel_types, overlap),
    ]


def _queue_lines(queue: pd.DataFrame) -> list[str]:
    """Median launch-queue length on each rank's busiest stream: near 0-1 means the host never runs ahead."""
    lines = []
    q = queue["queue_length"] if "queue_length" in queue.columns.get_level_values(0) else queue
    for (rank, stream), row in q.iterrows():
        lines.append((int(rank), int(stream), float(row["count"]), float(row["50%"])))
    busiest: dict[int, tuple[int, float, float]] = {}
    for rank, stream, count, median in lines:
        if rank not in busiest or count > busiest[rank][1]:
            busiest[rank] = (stream, count, median)
    return [
        f"rank{r}/trace.json.gz: HTA queue length on stream {s} (busiest) median {m:.0f} over {c:.0f} samples"
        for r, (s, c, m) in sorted(busiest.items())
    ]


def _straggler(ta: Any) -> Finding | None:
    """HTA's straggler analysis through its public hook, keeping the metric it computes for magnitudes."""
    from hta.analyzers.straggler import _compute_normalized_start_time_of_significant_comm_kernels

    captured: dict[str, Any] = {}

    def keep_metric(df: pd.DataFrame, symbol_table: Any, n_stragglers: int, visualize: bool) -> pd.Series:
        metric, column = _compute_normalized_start_time_of_significant_comm_kernels(df, symbol_table)
        captured["metric"] = metric.rename(columns={column: "normalized_start_time"})
        captured["kernel"] = symbol_table.get_sym_table()[int(metric["name"].iloc[0])] if len(metric) else None
        latest = metric.loc[metric.groupby("iteration")[column].idxmax(), "rank"]
        return latest.value_counts()

    _step(
        "finding stragglers", None,
        lambda: ta.get_potential_stragglers(num_candidates=1, visualize=False, straggler_identification_impl=keep_metric),
    )
    metric = captured.get("metric")
    if metric is None or metric.empty:
        return None
    kernel = captured.get("kernel")
    short = kernel.split("(")[0] if isinstance(kernel, str) else None
    return mapping.straggler_finding(metric[["rank", "iteration", "normalized_start_time"]], short)


# --- critical path ---------------------------------------------------------------------------------


def _kernel_optional_cpgraph() -> type:
    from hta.analyzers.critical_path_analysis import CPGraph

    class _KernelOptionalCPGraph(CPGraph):
        """HTA's CPGraph, minus the kernel part on ranks with no GPU events (CPU-only traces), and with event
        names looked up in a dict: HTA's ``_get_node_name`` reads one pandas cell per call, once or twice per
        node while it builds the graph (``_is_cuda_runtime_event_node``), half of a CPU bundle's diagnosis."""

        def _construct_graph_from_kernels(self) -> None:
            if (self.trace_df["stream"] >= 0).any():
                super()._construct_graph_from_kernels()

        def _get_node_name(self, ev_id: int) -> str:
            if ev_id < 0:
                return "ROOT"
            names = self.__dict__.get("_names_by_event")
            if names is None or names[0] is not self.trace_df:  # built for this very frame, as HTA reads it
                symbols = self.symbol_table.get_sym_table()
                names = (self.trace_df, {ev: symbols[n] for ev, n in self.trace_df["name"].items()})
                self.__dict__["_names_by_event"] = names
            return names[1][ev_id]

        def get_critical_path_breakdown(self) -> pd.DataFrame | None:
            """HTA's own (traceinsight 0.6.1), but for ``bound_by``: HTA applies it row by row, a pandas Series
            built and read per critical-path edge (9.5 of 29 s on a many-op CPU bundle); it reads only the edge's
            type, name and stream, so HTA's own ``bound_by`` is called once per distinct triple."""
            from hta.common.trace_symbol_table import decode_symbol_id_to_symbol_name

            if len(self.critical_path_nodes) == 0:
                return None
            trace_df = self.trace_df
            decode_symbol_id_to_symbol_name(trace_df, self.symbol_table, use_shorten_name=True)
            edge_df = pd.DataFrame.from_records(
                {"event_idx": self.get_event_attribution_for_edge(e), "duration": e.weight, "type": str(e.type.value)}
                for e in self.critical_path_edges_set
            )
            edges = pd.merge(edge_df, trace_df[["s_name", "cat", "pid", "tid", "stream", "index"]],
                             left_on="event_idx", right_on="index", how="left")
            bound: dict[tuple[Any, Any, Any], str] = {}
            column = []
            for key in zip(edges["type"].tolist(), edges["s_name"].tolist(), edges["stream"].tolist()):
                if key not in bound:  # a NaN name or stream never equals itself: such a key is just computed again
                    bound[key] = self.bound_by(dict(zip(("type", "s_name", "stream"), key)))
                column.append(bound[key])
            edges["bound_by"] = pd.Series(column, index=edges.index)
            return edges

    return _KernelOptionalCPGraph


def critical_path_window(t: Any, rank: int) -> tuple[float, float, int]:
    """(start, end, n_steps) of the analysed window on a rank: its CPU ProfilerStep spans, else the trace."""
    df = t.get_trace(rank)
    sym = t.symbol_table.get_sym_id_map()
    step_ids = [v for k, v in sym.items() if PROFILER_STEP.match(k)]
    steps = df[df["name"].isin(step_ids) & (df["stream"] < 0)]
    if len(steps):
        return float(steps["ts"].min()), float((steps["ts"] + steps["dur"]).max()), len(steps)
    return float(df["ts"].min()), float((df["ts"] + df["dur"].clip(lower=0)).max()), 0


def _critical_path(t: Any, rank: int) -> mapping.CriticalPathSummary | None:
    start, end, n_steps = critical_path_window(t, rank)
    if end <= start:
        return None

    def run() -> pd.DataFrame | None:
        trace_df = t.get_trace(rank)
        sym = t.symbol_table.get_sym_id_map()
        cpu = trace_df[trace_df["stream"].eq(-1)]
        a = cpu[(cpu["ts"] >= start) & (cpu["ts"] <= end) & (cpu["dur"] > 0)]
        gpu = trace_df[trace_df["stream"].ne(-1)]
        runtime = cpu.set_index("index_correlation")[["ts", "dur"]]
        b = gpu[["ts", "dur", "correlation", "name"]].join(runtime, rsuffix="_runtime")
        b = b[
            ((b["ts_runtime"] >= start) & (b["ts_runtime"] <= end) & (b["dur_runtime"] > 0))
            | (b["name"] == sym.get("Stream Wait Event", -200))
        ]
        clipped = trace_df.loc[a.index.union(b.index)].copy()
        t_clipped = copy.copy(t)
        t_clipped.traces = dict(t.traces)
        t_clipped.traces[rank] = clipped
        graph = _kernel_optional_cpgraph()(t_clipped, t, rank, data_load_events=DATA_LOAD_EVENTS)
        if not graph.critical_path():
            raise RuntimeError("HTA could not find a critical path")
        return graph.get_critical_path_breakdown()

    breakdown = _step("computing the critical path", rank, run)
    return mapping.summarize_critical_path(rank, breakdown, end - start, n_steps)
