"""Where a run's diagnoses execute: a room between the run and {hosting, recording}, with one face (this module).

An executor is one class that meets :class:`Executor` (:mod:`.registry`), named by one line of :data:`EXECUTORS`:
``local`` (:mod:`.local`: a pool of slots in this process, one per job) and ``ray`` (:mod:`.ray_executor`: slots on
the workers of a Ray cluster, each opened by the same :class:`~diageval.hosting.Host` code on its node, so the
sandbox fails closed there exactly as it does here; a run's live cases are also recorded there, one recording per
node at a time, before any diagnosis starts). Adding one is a module and a registry line.

Every executor takes the same list of :class:`DiagnoseTask` (a bundle folder, its content key, the random id the
diagnoser is shown, the folder the diagnoser's output is kept in) and reports each finished task once to the
caller's ``on_done(index, outcome)``, where the outcome is the slot's :class:`~diageval.hosting.Attempt` or a
:class:`HarnessFailure` (the bundle failed its checksums, or the machine diagnosing it was lost twice): never
the diagnoser's fault. The caller (the run pipeline) stays the one writer of the run folder; an executor
only writes the diagnoser's kept output into each task's ``case_dir``, as a local slot does.

What travels to a Ray worker: the diagnoser spec, the host policy, the harness's hand-over (only for the
built-ins :mod:`diageval.hosting.handover` lists), and per task the bundle's files, its content key (the
sha256 of its ``bundle.json``) and the random id. Never a case id, a label or a run-folder path.
Nothing outside this package imports past this face (``tests/foundations/test_architecture.py``).
"""

from __future__ import annotations

from diageval.executors.registry import EXECUTORS, Executor, executor_for
from diageval.executors.tasks import DiagnoseTask, ExecutorSpec, HarnessFailure, OnDone, OnPrepared, Outcome, RecordingFailed

__all__ = ["EXECUTORS", "DiagnoseTask", "Executor", "ExecutorSpec", "HarnessFailure", "OnDone", "OnPrepared", "Outcome",
           "RecordingFailed", "executor_for"]
