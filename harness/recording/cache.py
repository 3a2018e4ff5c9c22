"""The bundle cache: recorded bundles under opaque keys, with their ground truth kept one folder above.

Cache layout (under ``bundle_cache_dir()``, or ``cache_dir``)::

    evidence/<key>/        an evidence bundle; ``key`` is opaque and says nothing about the case
    <key>.truth.json       case id, repeat, and the Verification (ground truth): OUTSIDE the bundle
    index.jsonl            one line per recording: case id, role (case, twin or base), repeat -> key
                           (for people; lookups recompute keys)

Bundles sit one folder below the truth files, so a diagnoser handed a bundle folder finds only other
opaque bundles beside it, not the labels.

``key`` hashes the case's recording spec (workload and faults, not labels or title), the code its recording
runs (:func:`recording_code_version`), the resolved device, the torch version and the repeat number (and for a
live regression or fleet, the specs of the runs it records). The code is the case's own: the registry entries
of its workload and faults, the sources of their modules, the shared recording and launch code
(:data:`RECORDING_ENTRY`), the assembly code of a bundle made from others (evidence edits: this module; a
fleet: ``fleet.py``), and every module of the package those import, found by reading their imports
(:func:`recording_sources`; :data:`NOT_RECORDING` says where the reading stops, and why). So a change to one
fault's module re-records only the cases that use that fault; a change to the launcher, the rank worker or the
bundle writer re-records every case; a change to verification re-records none. Repeat 0 is the bundle diagnosers see; repeats 1.. exist only to measure noise in
verification. A healthy twin has the same spec as a healthy control of the same workload, so they
share cache entries.

A case whose faults include evidence edits (``BundleFault``: a trace dropped, a clock skewed, ...) is
not recorded again: its bundle is derived from the cached recording of the same case without those edits
(its "base", recorded first if missing, under the base's own key, so the base case shares it), copied,
edited and given a fresh manifest and bundle id. ``force`` re-derives it from the base; it does not
re-record the base (force the case without the edits for that).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from collections.abc import Sequence
from typing import Any, Literal

from diageval.cases.model import Case
from diageval.fileio import append_jsonl, atomic_write_text
from diageval.recording.draw import RecordingDraw
from diageval.recording.truth import TruthRecord

_HARNESS = Path(__file__).resolve().parent.parent
# What runs every recording, relative to the package root, by name: the rank worker is started by name in each
# rank process (no import reaches it), the launcher and record.py drive it, plugin.py loads the case's workload
# and faults, bundle/model.py writes the bundle. Everything they import inside the package is found by reading
# their imports (:func:`recording_sources`), so nothing they run is left out by a list that went stale.
RECORDING_ENTRY = ("recording/record.py", "recording/launcher.py", "recording/rank_worker.py", "recording/plugin.py",
                   "bundle/model.py")
# What assembles a bundle from others, added for the cases whose bundle it makes: evidence edits applied to the
# recording without them (``derive_bundle`` here), a regression's or fleet's runs assembled (``fleet.py``), and
# the real traces a recorded regression or fleet imports (``recorded.py``).
EDIT_ENTRY = ("recording/cache.py",)
FLEET_ENTRY = ("recording/fleet.py",)
RECORDED_ENTRY = ("recording/recorded.py",)
# Where the reading of imports stops, and why. Modules that judge recordings but never shape one: a change to
# them re-verifies (prepare re-verifies a record its test did not make), it does not re-record. The registries:
# each holds every workload's or fault's entry; a case is keyed on its own entries instead (name, implementation,
# params model, check), so adding or changing another fault leaves it alone. ``cases/``: a case enters the key as
# its content (``Case.spec_hash``: workload and faults, not labels), and a fleet's members, the one thing the case
# model derives for a recording, as their own specs; the case model's code validates and describes cases.
NOT_RECORDING = ("recording/verify.py", "recording/truth.py", "recording/manifest_test.py",
                 "recording/label_support.py", "recording/fleet_verify.py", "recording/prepare.py",
                 "recording/faults/__init__.py", "recording/workloads/__init__.py", "cases/")


def recording_sources(case: Case) -> list[str]:
    """The sources a recording of ``case`` runs, relative to the package root, sorted: the shared recording and
    launch code (:data:`RECORDING_ENTRY`), the modules of its workload and of each of its faults (a fleet's: its
    members'), the assembly code of a derived bundle, and everything those import inside the package, except
    :data:`NOT_RECORDING`."""
    return list(_closure(str(_HARNESS), _entries(case, _plugins(_members(case)))))


def recording_code_version(case: Case, members: list[Case] | None = None) -> str:
    """sha256 over the case's registry entries and the sources its recording runs (:func:`recording_sources`:
    paths and bytes). Every cache lookup needs it (several a case); a file is read and parsed again only when its
    size or modification time changed. ``members``: a fleet's :func:`_members`, when the caller has them."""
    plugins = _plugins(_members(case) if members is None else members)
    h = hashlib.sha256()
    for kind, info in plugins:
        check = getattr(info, "check", None)
        h.update(json.dumps([kind, info.name, info.impl, info.params_model.__qualname__,
                             getattr(check, "__qualname__", None), list(getattr(info, "injects", ()))]).encode())
    _hash_sources(h, _entries(case, plugins))
    return h.hexdigest()


def modules_code_version(modules: Sequence[str]) -> str:
    """sha256 over the sources of ``modules`` (dotted names inside the package) and everything they import there
    (:func:`_closure`, paths and bytes): the code a recording runs that no case names, such as an in-job monitor
    loaded by its registry line (:mod:`diageval.recording.monitors.evidence`)."""
    root = str(_HARNESS)
    h = hashlib.sha256()
    _hash_sources(h, tuple(sorted({rel for m in modules if (rel := _module_path(root, m))})))
    return h.hexdigest()


def _hash_sources(h: Any, entries: tuple[str, ...]) -> None:
    """Feed ``h`` the path and content hash of ``entries`` and every package module they import (:func:`_closure`)."""
    root = str(_HARNESS)
    for rel in _closure(root, entries):
        h.update(rel.encode())
        h.update(_source_hash(*_stamp(root, rel)).encode())


def _members(case: Case) -> list[Case]:
    """The job cases a recording of ``case`` records: a live regression's or fleet's runs, else the case itself."""
    return [member for _, member in case.fleet_members()] if case.fleet is not None and case.workload else [case]


def _plugins(members: list[Case]) -> list[tuple[str, Any]]:
    """The registry entries the recordings of ``members`` (:func:`_members`) use, as (``workload`` or ``fault``,
    entry), sorted (an unknown name is the case validator's to report: skipped here)."""
    from diageval.recording.faults import FAULTS
    from diageval.recording.workloads import WORKLOADS

    out: dict[tuple[str, str], Any] = {}
    for c in members:
        if c.workload is not None and c.workload.name in WORKLOADS:
            out[("workload", c.workload.name)] = WORKLOADS[c.workload.name]
        for spec in c.faults:
            if spec.name in FAULTS:
                out[("fault", spec.name)] = FAULTS[spec.name]
    return [(k[0], out[k]) for k in sorted(out)]


def _entries(case: Case, plugins: list[tuple[str, Any]]) -> tuple[str, ...]:
    """Where reading the imports starts for ``case`` (:func:`recording_sources`)."""
    root = str(_HARNESS)
    entries = [*RECORDING_ENTRY]
    for _, info in plugins:
        modules = [info.impl.partition(":")[0], info.params_model.__module__]
        check = getattr(info, "check", None)
        modules += [check.__module__] if check is not None else []
        entries += [rel for m in modules if (rel := _module_path(root, m))]
    if any(kind == "fault" and info.load().stage == "bundle" for kind, info in plugins):  # loads without torch
        entries += EDIT_ENTRY
    if case.fleet is not None:
        entries += FLEET_ENTRY if case.workload is not None else FLEET_ENTRY + RECORDED_ENTRY
    return tuple(sorted(set(entries)))


def _stops(rel: str) -> bool:
    return rel in NOT_RECORDING or rel.startswith(tuple(n for n in NOT_RECORDING if n.endswith("/")))


def _closure(root: str, entries: tuple[str, ...]) -> tuple[str, ...]:
    """``entries`` and every module of the package they import, transitively, stopping at :data:`NOT_RECORDING`;
    sorted (each file parsed again only when its size or modification time changed)."""
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        rel = todo.pop()
        if rel in seen or _stops(rel):
            continue
        seen.add(rel)
        todo += _parsed_imports(root, *_stamp(root, rel))
    return tuple(sorted(seen))


@functools.lru_cache(maxsize=4096)
def _module_path(root: str, module: str) -> str | None:
    """``diageval.a.b`` -> ``a/b.py`` (or ``a/b/__init__.py``), relative to the package root; None outside it."""
    if module != "diageval" and not module.startswith("diageval."):
        return None
    base = os.path.join(root, *module.split(".")[1:])
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return os.path.relpath(path, root).replace(os.sep, "/")
    return None


def _stamp(root: str, rel: str) -> tuple[str, int, int]:
    path = os.path.join(root, rel)
    st = os.stat(path)
    return path, st.st_size, st.st_mtime_ns


@functools.lru_cache(maxsize=1024)
def _parsed_imports(root: str, path: str, size: int, mtime_ns: int) -> tuple[str, ...]:
    """The package's modules ``path`` imports anywhere (a function's lazy import too; not under
    ``if TYPE_CHECKING``), relative to the package root ``root``."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and isinstance(child.test, ast.Name) and child.test.id == "TYPE_CHECKING":
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.update(m for a in child.names if (m := _module_path(root, a.name)))
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                for a in child.names:  # ``from pkg import module`` imports the module, else the name is pkg's
                    m = _module_path(root, f"{child.module}.{a.name}") or _module_path(root, child.module)
                    if m:
                        found.add(m)
            visit(child)

    visit(ast.parse(Path(path).read_bytes(), filename=path))
    return tuple(sorted(found))


@functools.lru_cache(maxsize=1024)
def _source_hash(path: str, size: int, mtime_ns: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@functools.cache
def torch_version() -> str:
    """The installed torch's version, from its distribution's metadata (importing torch to read
    ``torch.__version__`` costs seconds on 2 cores, in every run that only reads the cache); the same string
    for pip and conda builds (``2.13.0+cpu``); ``torch.__version__`` where torch is not an installed
    distribution (a source tree on the path)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        import torch

        return torch.__version__


def cache_key(case: Case, device: str, repeat: int = 0) -> str:
    """The opaque key of ``case``'s recording (module doc): its spec, the code it runs, device, torch, repeat."""
    members = _members(case)
    payload = {
        "spec": case.spec_hash(),
        "code": recording_code_version(case, members),
        "device": device,
        "torch": torch_version(),
        "repeat": repeat,
    }
    if case.fleet is not None and case.workload is not None:  # what the case model derives for each run to record
        payload["members"] = [member.id for member in members]  # ids derived from their specs
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:32]


def bundles_root(cache: Path) -> Path:
    """The folder holding the cached bundle folders (one level below the truth files)."""
    return cache / "evidence"


def truth_path(cache: Path, key: str) -> Path:
    return cache / f"{key}.truth.json"


def read_truth(cache: Path, key: str) -> TruthRecord | None:
    path = truth_path(cache, key)
    if not path.is_file():
        return None
    return TruthRecord.model_validate_json(path.read_text(encoding="utf-8"))


def write_truth(cache: Path, record: TruthRecord) -> None:
    atomic_write_text(truth_path(cache, record.key), record.model_dump_json(indent=2) + "\n")


def note_draw(cache: Path, key: str, draw: RecordingDraw | None) -> None:
    """Keep ``draw`` (what the recording of a job case drew, recording/draw.py) in the truth record of the bundle
    ``key``, outside the bundle, when it is not there yet."""
    truth = read_truth(cache, key)
    if draw is not None and truth is not None and truth.draw != draw:
        write_truth(cache, truth.model_copy(update={"draw": draw}))


def ensure_bundle(case: Case, device: str, *, repeat: int = 0, force: bool = False,
                  cache_dir: Path | None = None, role: Literal["case", "twin", "base"] = "case") -> tuple[str, Path, bool]:
    """The cached bundle of ``case`` (recorded now if missing or ``force``): (key, folder, recorded_now).

    ``device`` must already be resolved (``cpu`` or ``cuda``). ``role`` says, in the truth file and the
    index, whether ``case`` is a case or the healthy twin of the case with that id (twins keep the id).
    Twins of different cases with the same workload share one entry: its truth names the first. ``base``:
    the live part of a case with evidence edits, recorded for its verification; it writes no truth file
    (its key is the key of any case with the same live spec, whose truth and verification must stay).
    """
    from diageval.bundle.model import MANIFEST_NAME
    from diageval.paths import bundle_cache_dir
    from diageval.recording.record import record_case

    cache = Path(cache_dir) if cache_dir else bundle_cache_dir()
    key = cache_key(case, device, repeat)
    folder = bundles_root(cache) / key
    if not force and (folder / MANIFEST_NAME).is_file():
        return key, folder, False
    live_case, edits = split_bundle_edits(case)
    if edits:  # evidence edits run on the cached recording of the same case without them: no re-recording
        base_key = cache_key(live_case, device, repeat)
        base = bundles_root(cache) / base_key
        if not (base / MANIFEST_NAME).is_file():
            record_case(live_case, base, device=device)
            append_jsonl(cache / "index.jsonl", {"case_id": case.id, "role": "base", "key": base_key, "repeat": repeat,
                                                 "device": device, "recorded": datetime.now(timezone.utc).isoformat()})
        derive_bundle(base, folder, edits)
    else:
        record_case(case, folder, device=device)
    if role != "base":  # a base's key may be another case's, whose truth (and verification) stays
        previous = read_truth(cache, key)
        if previous is None or previous.case_id != case.id or previous.role != role or force:
            write_truth(cache, TruthRecord(case_id=case.id, role=role, key=key, repeat=repeat,
                                           recorded=datetime.now(timezone.utc)))
    append_jsonl(cache / "index.jsonl", {"case_id": case.id, "role": role, "key": key, "repeat": repeat,
                                         "device": device, "recorded": datetime.now(timezone.utc).isoformat()})
    return key, folder, True


def split_bundle_edits(case: Case) -> tuple[Case, list]:
    """The case without its evidence edits, and those edits (instantiated), in case order."""
    from diageval.recording.faults import FAULTS

    live, edits = [], []
    for spec in case.faults:
        info = FAULTS[spec.name]
        impl = info.load()
        if impl.stage == "bundle":
            edits.append(impl(info.params_model.model_validate(spec.params)))
        else:
            live.append(spec)
    return case.model_copy(update={"faults": live}), edits


def derive_bundle(base: Path, dest: Path, edits: list) -> None:
    """Copy the bundle ``base`` to ``dest`` (replaced), apply ``edits``, write a fresh manifest; atomic."""
    import shutil
    import uuid

    from diageval.bundle.model import MANIFEST_NAME, BundleManifest, describe_files
    from diageval.fileio import owned_temp_dir
    from diageval.recording.faults.base import BundleFault
    from diageval.recording.record import TMP_PREFIX

    source = BundleManifest.model_validate_json((base / MANIFEST_NAME).read_text(encoding="utf-8"))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = owned_temp_dir(dest.parent, TMP_PREFIX)
    try:
        shutil.copytree(base, tmp, dirs_exist_ok=True)
        (tmp / MANIFEST_NAME).unlink()
        env = source.env
        for edit in edits:
            edit.apply(tmp)
            env = edit.bundle_env(env) if isinstance(edit, BundleFault) else env  # a tier filter keeps the job
        for edit in edits:  # what each edit breaks is in the bundle (issue 40): checked once all are applied
            if isinstance(edit, BundleFault):
                edit.check_present(tmp)
        manifest = source.model_copy(update={"bundle_id": uuid.uuid4().hex, "created": datetime.now(timezone.utc),
                                             "env": env, "files": describe_files(tmp)})
        atomic_write_text(tmp / MANIFEST_NAME, manifest.model_dump_json(indent=2) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
