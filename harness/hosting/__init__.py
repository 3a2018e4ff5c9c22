"""Hosting an untrusted diagnoser: the trust boundary, in one room with one face.

Everything outside this package uses only the names below (``tests/foundations/test_architecture.py`` enforces it):

* :class:`HostPolicy` (with :class:`BoxLimits`): what a run allows its diagnoser;
* :meth:`Host.open` resolves a ``--diagnoser`` spec under a policy; :meth:`Host.slot` gives a place to
  run it, whose ``diagnose(bundle_dir, case_dir, bundle_id=...)`` returns an :class:`Attempt`;
  :meth:`Host.handover` builds the one thing a few built-ins receive;
* every failure of hosting itself is a :class:`HostError` (what a diagnoser does wrong on a case is its
  attempt's status, never an exception);
* :func:`list_diagnosers`, :func:`sandbox_problem` and :func:`remove_stale_boxes` for the command line;
* :class:`LiveGroups`, :class:`Slot` and the kept files' names (``STDOUT_NAME``, ``STDERR_NAME``) for the executors
  (``diageval.executors``, a room of its own), which open slots here or on other machines.

Inside: the sandbox (:mod:`.sandbox`), what a run's boxes hide and show (:mod:`.box_policy`,
:mod:`.spec_paths`, :mod:`.label_stores`, :mod:`.python_paths`), their limits (:mod:`.limits`), the spec registry
(:mod:`.registry`), the built-ins' roles and hand-overs (:mod:`.handover`, :mod:`.corpus`), the two kinds
of slot (:mod:`.worker` with :mod:`.worker_process`, :mod:`.command`), the case folders
(:mod:`.case_box`, :mod:`.private_bundle`) and process groups (:mod:`.process_groups`).
"""

from diageval.hosting.attempt import Attempt, AttemptStatus, Slot
from diageval.hosting.case_box import STDERR_NAME, STDOUT_NAME
from diageval.hosting.errors import (
    BundleIntegrityError,
    DiagnoserSpecError,
    HostError,
    SandboxUnavailable,
    SpecPathError,
    WorkerStartError,
)
from diageval.hosting.host import Host, list_diagnosers
from diageval.hosting.policy import DEFAULT_TIMEOUT_S, BoxLimits, HostPolicy
from diageval.hosting.process_groups import LiveGroups
from diageval.hosting.sandbox import probe as sandbox_problem
from diageval.hosting.sandbox import remove_stale_boxes

__all__ = [
    "DEFAULT_TIMEOUT_S", "Attempt", "AttemptStatus", "BoxLimits", "BundleIntegrityError", "DiagnoserSpecError", "Host",
    "HostError", "HostPolicy", "LiveGroups", "STDERR_NAME", "STDOUT_NAME", "SandboxUnavailable", "Slot", "SpecPathError",
    "WorkerStartError", "list_diagnosers", "remove_stale_boxes", "sandbox_problem",
]
