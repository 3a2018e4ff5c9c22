"""Recording: a case's evidence recorded live (or imported), verified and cached, in one room with one face.

Everything outside this package uses only the names below (``tests/foundations/test_architecture.py`` enforces it;
the one exception is the cases room, below recording, which reads the fault and workload registries
``diageval.recording.faults`` and ``diageval.recording.workloads`` to check a case file: this face imports the case
model, so reading them through it would be an import cycle):

* :class:`RecordingPolicy`: what to record (verify or not, force), where (the bundle cache, the data folder), on
  which device, with which in-job monitor; :func:`prepare_case`, the one call a run makes: a loaded case under a
  policy -> :class:`Evidence` (its bundle folder and the :class:`~diageval.scoring.results.EvidenceFacts` scoring
  copies) or a :class:`CaseEnd` (unavailable, harness_error or invalid, saying why, as the result line says it);
* what an executor that records on other machines needs: :func:`prepare_evidence` (an :data:`EvidenceFn`, which
  answers a :class:`PreparedEvidence` or raises), :func:`seed_keys` (the cached recordings a preparation may
  read), the cache's layout (:func:`bundles_root`, :func:`truth_path`, :func:`write_truth`, :class:`TruthRecord`)
  and its draw secret (:data:`SECRET_NAME`, :func:`cache_secret`);
* the commands' calls: :func:`record_cases`, :func:`verify_cases` (with :data:`VERIFY_COLUMNS`,
  :func:`verification_row`, :func:`narrow_margin`, :data:`RUN_TO_RUN_MARGIN`), fetching recorded cases' files
  (:func:`plan_fetch`, :func:`fetch_files`, :func:`default_mirror`, :func:`fetch_command`, :class:`FetchError`,
  :func:`unavailable_cases`), :class:`RecordingError`;
* for the other rooms: :class:`Verification` (a positive case's check), :func:`cuda_device_count`,
  :func:`derive_bundle` (a bundle made from another by an edit: an evidence tier's cut), :func:`monitor_for_spec`
  (whether a diagnoser spec is an in-job monitor), :data:`FAULTS` (the corpus hand-over's fault words), and the
  launcher's process hygiene that hosting's boxes share (:data:`MP_PREFIX`, :func:`die_with_parent`).

Inside: the launcher and rank worker (:mod:`.launcher`, :mod:`.rank_worker`, :mod:`.record`), the bundle writer,
the cache and its key (:mod:`.cache`), the draw (:mod:`.draw`), verification (:mod:`.verify`, :mod:`.manifest_test`,
:mod:`.label_support`, :mod:`.fleet_verify`, :mod:`.truth`), regressions and fleets (:mod:`.fleet`), recorded
cases (:mod:`.recorded`, :mod:`.fetch`), in-job monitors (:mod:`.monitors`), the workloads and faults.

The face loads what a name needs when the name is first used (:data:`_EXPORTS`, read by :func:`__getattr__`; the
same imports, spelled out under ``TYPE_CHECKING``, are what type checkers and the architecture test read): every
process that imports one module of the package (a rank worker, a box's worker, a case check reading the fault
registry) imports this file first, and importing all the face's modules costs ~1 s on a loaded 2-core machine
(the case model, the cache, the trace importer behind fetch; measured with ``python -X importtime``), where those
processes need ~0.2 s. Importing this package does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {  # name -> the module that defines it
    **dict.fromkeys(("bundles_root", "derive_bundle", "truth_path", "write_truth"), "diageval.recording.cache"),
    **dict.fromkeys(("SECRET_NAME", "cache_secret"), "diageval.recording.draw"),
    "FAULTS": "diageval.recording.faults",
    **dict.fromkeys(("FetchError", "default_mirror", "fetch_command", "fetch_files", "plan_fetch"),
                    "diageval.recording.fetch"),
    **dict.fromkeys(("MP_PREFIX", "RecordingError", "die_with_parent"), "diageval.recording.launcher"),
    "monitor_for_spec": "diageval.recording.monitors",
    **dict.fromkeys(("Device", "EvidenceFn", "PreparedEvidence", "RecordingPolicy"), "diageval.recording.policy"),
    **dict.fromkeys(("CaseEnd", "Evidence", "prepare_case", "prepare_evidence", "record_cases", "seed_keys"),
                    "diageval.recording.prepare"),
    "cuda_device_count": "diageval.recording.record",
    "unavailable_cases": "diageval.recording.recorded",
    **dict.fromkeys(("TruthRecord", "Verification"), "diageval.recording.truth"),
    **dict.fromkeys(("RUN_TO_RUN_MARGIN", "VERIFY_COLUMNS", "narrow_margin", "verification_row", "verify_cases"),
                    "diageval.recording.verify"),
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """A name of the face, imported from its module on first use (then kept here)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from diageval.recording.cache import bundles_root, derive_bundle, truth_path, write_truth
    from diageval.recording.draw import SECRET_NAME, cache_secret
    from diageval.recording.faults import FAULTS
    from diageval.recording.fetch import FetchError, default_mirror, fetch_command, fetch_files, plan_fetch
    from diageval.recording.launcher import MP_PREFIX, RecordingError, die_with_parent
    from diageval.recording.monitors import monitor_for_spec
    from diageval.recording.policy import Device, EvidenceFn, PreparedEvidence, RecordingPolicy
    from diageval.recording.prepare import CaseEnd, Evidence, prepare_case, prepare_evidence, record_cases, seed_keys
    from diageval.recording.record import cuda_device_count
    from diageval.recording.recorded import unavailable_cases
    from diageval.recording.truth import TruthRecord, Verification
    from diageval.recording.verify import (
        RUN_TO_RUN_MARGIN,
        VERIFY_COLUMNS,
        narrow_margin,
        verification_row,
        verify_cases,
    )
