"""The recorder's side of recording on Ray: one case's evidence prepared on the node this task runs on.

A plain function (the driver makes it a Ray task that needs one unit of :data:`RECORDER_RESOURCE`, which
each node declares once, so a node runs one recording at a time; tests call it directly). It runs the
evidence function (``prepare_evidence``) into a private cache of its own (a fresh temp folder), seeded
with the driver's cached bundles of this case (its repeats, its healthy twin's, its base: checked on
arrival) and its stored truth record (so that it reuses a stored verification exactly where this machine
would), and answers what that cache gained: every new bundle (packed, by content key), every truth record
written or changed, every index line. The temp cache is then removed, so nothing of the case (no truth file, no
label) stays on the node; the driver keeps all of it in its own cache (:mod:`.ray_recording`).

The answer is data, never an exception: ``{"node", "pid", "started", "ended"}`` (this node's clock, seconds
since the epoch: when the recording held the node) and either ``{"prepared", "bundles", "truths",
"index"}`` or ``{"error"}`` (``Type: message`` of what the evidence function raised).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

from diageval.bundle.transfer import Packed, TransferDamaged, pack_bundle, receive_bundle
from diageval.recording import EvidenceFn, RecordingPolicy

RECORDER_RESOURCE = "diageval_recorder"
"""The custom resource a recording task takes one unit of: a node that declares ``{"diageval_recorder": 1}``
(``ray start --resources '{"diageval_recorder": 1}'``) runs one recording at a time; a node without it none."""
TEMP_PREFIX = "diageval-recorder-"
Seeded = dict[str, tuple[str, Packed]]  # cache key -> (sha256 of its bundle.json, the packed bundle)


def record_here(prepare: EvidenceFn, loaded: Any, policy: RecordingPolicy, seeded: Seeded,
                truths: dict[str, str] | None = None, secret: str | None = None) -> dict[str, Any]:
    """Prepare ``loaded``'s evidence with ``prepare(loaded, policy)``, the policy's cache being a private one
    seeded with the bundles ``seeded`` and the truth records ``truths`` (cache key -> the record's text);
    answer what the cache gained (see the module's docstring). ``secret``: the driver's draw secret
    (recording/draw.py), so that this node draws each case as the driver does."""
    from diageval.fileio import owned_temp_dir, remove_stale_temp_dirs

    answer: dict[str, Any] = {"node": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
    remove_stale_temp_dirs(Path(tempfile.gettempdir()), TEMP_PREFIX)  # left by a recorder that was killed
    cache = owned_temp_dir(Path(tempfile.gettempdir()), TEMP_PREFIX)
    try:
        if secret is not None:
            from diageval.recording import SECRET_NAME

            (cache / SECRET_NAME).write_text(secret + "\n")
        answer.update(_prepare_in(cache, prepare, loaded, policy, seeded, truths or {}))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    answer["ended"] = time.time()
    return answer


def _prepare_in(cache: Path, prepare: EvidenceFn, loaded: Any, policy: RecordingPolicy, seeded: Seeded,
                truths: dict[str, str]) -> dict[str, Any]:
    from diageval.bundle.model import MANIFEST_NAME
    from diageval.fileio import atomic_write_text, read_jsonl
    from diageval.recording import bundles_root, truth_path

    root = bundles_root(cache)
    root.mkdir(parents=True)
    try:
        for key, (sha, packed) in seeded.items():
            receive_bundle(packed, sha, root / key)
    except TransferDamaged as exc:
        return {"error": f"a cached bundle sent to seed this recording: {exc}"}
    for key, text in truths.items():
        atomic_write_text(truth_path(cache, key), text)
    try:
        prepared = prepare(loaded, policy.model_copy(update={"cache_dir": cache}))
    except Exception as exc:  # the driver makes it the case's harness_error, naming the node
        return {"error": f"{type(exc).__name__}: {exc}"}
    folder = Path(prepared.bundle_dir)
    if folder.parent != root:
        return {"error": f"the evidence function answered a bundle outside its cache: {folder}"}
    bundles = {}
    for entry in sorted(root.iterdir()):
        if entry.name not in seeded and (entry / MANIFEST_NAME).is_file():
            packed = pack_bundle(entry)
            bundles[entry.name] = (hashlib.sha256(packed[MANIFEST_NAME]).hexdigest(), packed)
    return {
        "prepared": prepared.model_copy(update={"bundle_dir": Path(folder.name)}),
        "bundles": bundles,
        "truths": [text for p in sorted(cache.glob("*.truth.json"))
                   if (text := p.read_text(encoding="utf-8")) != truths.get(p.name.removesuffix(".truth.json"))],
        "index": list(read_jsonl(cache / "index.jsonl")) if (cache / "index.jsonl").is_file() else [],
    }
