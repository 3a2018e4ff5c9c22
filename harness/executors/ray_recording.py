"""Recording on Ray, the driver's side: each live case's evidence prepared by a Ray task on a node of its own.

A recording is a timing measurement, so two must never share a machine: every recording task takes one unit
of the custom resource :data:`~.recording_task.RECORDER_RESOURCE` (``diageval_recorder``), which each node
declares once (``ray start --resources '{"diageval_recorder": 1}'``; the local Ray a run starts declares it
too), and Ray runs a task only where a unit is free: one recording per node at a time, on as many nodes as
declare it. The run's diagnoses start only after every recording is over (the pipeline's two phases).

* **What goes**: the case (the recorder runs its workload and faults and verifies them, so it reads the case,
  labels included, as this machine does when it records), the evidence function, the recording policy, and
  this machine's cached bundles of the case (its repeats, its healthy twin's, its base, by content key) with
  its stored truth record, so a recorder records only what the cache lacks and reuses or redoes the
  verification exactly where this machine would, on the same recordings. Only a recording task receives
  these; a diagnose slot never does.
* **What comes back**: every bundle the recorder's private cache gained, by content key, checked against its
  ``bundle.json`` and every file against it (:func:`~.bundle_transfer.receive_bundle`) before it enters this
  machine's cache (a key already there keeps its bundle); the truth records (the verification) and index
  lines, written here only: the recorder's temp cache is removed when the task ends, so no truth stays on a
  node, and a diagnose slot only ever receives a bundle.
* **A lost recorder** (its process or node died) is retried once by Ray; lost twice, the case fails like a
  recording that failed (``harness_error``). A recording that fails names the node.

Cases recorded elsewhere stay here: imported ones (their traces are in this machine's data folder) and
regressions and fleets (their runs are shared members of this machine's cache).
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

from diageval.cases.load import LoadedCase
from diageval.cases.model import Case
from diageval.hosting import HostError
from diageval.recording import EvidenceFn, RecordingPolicy
from diageval.bundle.transfer import TransferDamaged, pack_bundle, receive_bundle
from diageval.executors.tasks import OnPrepared, RecordingFailed
from diageval.executors.recording_task import RECORDER_RESOURCE, Seeded, record_here

def recorded_on_ray(case: Case) -> bool:
    """Whether a ray run records ``case`` on a recorder node: one live job (not imported, not a fleet)."""
    return case.recorded is None and case.fleet is None


def prepare_on_ray(cases: list[LoadedCase], prepare: EvidenceFn, on_done: OnPrepared, *, policy: RecordingPolicy,
                   address: str | None) -> None:
    """Prepare every case's evidence with ``prepare`` under ``policy`` on the recorder nodes of the Ray cluster at
    ``address`` (joined or started, as for the diagnoses), at most one per node at a time; call ``on_done(index,
    answer, s)`` here as each ends (with the seconds its task took there), ``answer`` the prepared evidence with its
    bundle in this machine's cache (``policy.cache_dir``, default the bundle cache), or a :class:`RecordingFailed`."""
    from diageval.executors.ray_pool import _connect, _first_line, _import_ray
    from diageval.paths import bundle_cache_dir

    if not cases:
        return
    ray = _import_ray()
    started = _connect(ray, address)
    cache = Path(policy.cache_dir) if policy.cache_dir else bundle_cache_dir()
    refs: dict[Any, int] = {}
    try:
        recorders = int(ray.cluster_resources().get(RECORDER_RESOURCE, 0))
        if recorders < 1:
            raise HostError(f"no node of the Ray cluster declares the resource {RECORDER_RESOURCE}, so no case can be "
                            f"recorded there: start each node that may record with ray start --resources "
                            f"'{{\"{RECORDER_RESOURCE}\": 1}}'")
        task = ray.remote(num_cpus=1, resources={RECORDER_RESOURCE: 1}, max_retries=1)(record_here)
        lost = (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError, ray.exceptions.ObjectLostError,
                ray.exceptions.LocalRayletDiedError, ray.exceptions.OutOfMemoryError)
        pending = collections.deque(range(len(cases)))
        while pending or refs:
            while pending and len(refs) < 2 * recorders:  # Ray's resource runs one per recorder, the next one waits
                # there; no more are sent, so the seeds held here and in the object store stay few
                i = pending.popleft()
                seeded, truths = _seeds(cases[i].case, policy, cache)
                refs[task.remote(prepare, cases[i], policy, seeded, truths, _secret(cache))] = i
            [ref], _ = ray.wait(list(refs), num_returns=1)
            i = refs.pop(ref)
            try:
                answer = ray.get(ref)
            except lost as exc:
                on_done(i, RecordingFailed(f"the Ray worker recording it was lost twice ({type(exc).__name__}: "
                                           f"{_first_line(exc)})"), 0.0)
                continue
            except ray.exceptions.RayTaskError as exc:  # the task itself broke (record_here answers data otherwise)
                on_done(i, RecordingFailed(f"the recording task failed on Ray: {_first_line(exc)}"), 0.0)
                continue
            on_done(i, _keep(answer, cache), answer["ended"] - answer["started"])
    except BaseException:
        for ref in refs:
            try:
                ray.cancel(ref, force=True)
            except Exception:
                pass
        raise
    finally:
        if started:
            ray.shutdown()


def _keep(answer: dict[str, Any], cache: Path) -> Any:
    """Put what a recorder sent back into ``cache``; the prepared evidence, pointing there, or the failure."""
    from diageval.fileio import append_jsonl
    from diageval.recording import TruthRecord, bundles_root, write_truth

    node = answer.get("node", "?")
    if "error" in answer:
        return RecordingFailed(f"on Ray node {node}: {answer['error']}")
    root = bundles_root(cache)
    root.mkdir(parents=True, exist_ok=True)
    try:
        for key, (sha, packed) in answer["bundles"].items():
            receive_bundle(packed, sha, root / key)
    except TransferDamaged as exc:
        return RecordingFailed(f"recorded on Ray node {node}: {exc}")
    for text in answer["truths"]:
        write_truth(cache, TruthRecord.model_validate_json(text))
    for line in answer["index"]:
        append_jsonl(cache / "index.jsonl", line)
    prepared = answer["prepared"]
    return prepared.model_copy(update={"bundle_dir": root / Path(prepared.bundle_dir).name})


def _secret(cache: Path) -> str:
    """This cache's draw secret: the recorder draws each case as this machine does (recording/draw.py), so its
    recordings are the ones this cache's keys name."""
    from diageval.recording import cache_secret

    return cache_secret(cache)


def _seeds(case: Case, policy: RecordingPolicy, cache: Path) -> tuple[Seeded, dict[str, str]]:
    """This machine's cached bundles that preparing ``case`` may read (:func:`~diageval.recording.seed_keys`), keyed
    by cache key, each with the sha256 of its ``bundle.json``; and the truth record that preparation reads, when
    there is one."""
    import hashlib

    from diageval.bundle.model import MANIFEST_NAME
    from diageval.recording import bundles_root, seed_keys, truth_path

    keys = seed_keys(case, policy.model_copy(update={"cache_dir": cache}))
    if keys is None:
        return {}, {}
    seeded: Seeded = {}
    for key in keys[0]:
        folder = bundles_root(cache) / key
        if (folder / MANIFEST_NAME).is_file():
            packed = pack_bundle(folder)
            seeded[key] = (hashlib.sha256(packed[MANIFEST_NAME]).hexdigest(), packed)
    truth = truth_path(cache, keys[1])
    return seeded, ({keys[1]: truth.read_text(encoding="utf-8")} if truth.is_file() else {})
