"""The worker's side of :mod:`diageval.hosting.worker`: ``python -m diageval.hosting.worker_process``, inside a box.

It reads JSON-line requests on stdin and answers each on its original stdout (the protocol is described
in :mod:`diageval.hosting.worker`): it resolves and constructs the diagnoser (its import happens here, never
in the harness), hands it what the harness sends, diagnoses each private bundle copy with fds 1 and 2 on
the case's files, and writes the diagnosis to ``output.json`` for the harness to read through the one
diagnosis reader.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from diageval.hosting.case_box import OUTPUT_NAME, STDERR_NAME, STDOUT_NAME


@contextlib.contextmanager
def _captured(folder: Path) -> Iterator[None]:
    """Point fds 1 and 2 (and so print, logging and C libraries) at the case's files for a while."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(folder / STDOUT_NAME, "wb") as out, open(folder / STDERR_NAME, "wb") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _init(request: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    from diageval.hosting.registry import DiagnoserSpecError, resolve_diagnoser

    try:
        resolved = resolve_diagnoser(request["spec"])
    except DiagnoserSpecError as exc:
        return None, {"ok": False, "spec_error": True, "error": str(exc)}
    if resolved.needs_network and not request.get("allow_network"):  # before it is built: it may need its endpoint
        return None, {"ok": False, "spec_error": True, "error": (
            f"{resolved.name} needs the network (it says needs_network: it calls a model endpoint), and this run keeps "
            "diagnosers offline: run again with --allow-network")}
    diagnoser = resolved.factory()
    return diagnoser, {"ok": True, "name": resolved.name, "version": resolved.version, "origin": resolved.origin,
                       "claims": None if resolved.claims is None else list(resolved.claims),
                       "needs_network": resolved.needs_network}


def _prepare(diagnoser: Any, request: dict[str, Any]) -> dict[str, Any]:
    from diageval.hosting.corpus import PublicVocabulary, ReferenceCorpus

    handover = request["handover"]
    model = {"corpus": ReferenceCorpus, "vocabulary": PublicVocabulary}[handover["kind"]]
    diagnoser.prepare(model.model_validate(handover["data"]))
    return {"ok": True}


def _diagnose(diagnoser: Any, request: dict[str, Any]) -> dict[str, Any]:
    from pydantic import ValidationError

    from diageval.bundle.model import EvidenceBundle
    from diageval.diagnosers.base import DiagnoserFailed
    from diageval.diagnosis import Diagnosis
    from diageval.validation import field_path

    folder = Path(request["dir"])
    os.chdir(folder)
    start = time.perf_counter()
    try:
        with _captured(folder):
            try:
                result = diagnoser.diagnose(EvidenceBundle.open(Path(request["bundle"])))
            except BaseException:
                traceback.print_exc()  # into the case's stderr.txt
                raise
    except DiagnoserFailed as exc:  # an adapter whose tool answered with something unreadable says invalid_output,
        status = exc.status if exc.status in ("invalid_output", "cap_hit") else "diagnoser_error"  # an agent's cap cap_hit
        return _reply(status, start, error=f"{exc.status}: {exc}")
    except Exception as exc:
        return _reply("diagnoser_error", start, error=f"{type(exc).__name__}: {exc}")
    seconds = time.perf_counter() - start
    try:
        payload = result.model_dump(mode="json") if isinstance(result, Diagnosis) else result
        diagnosis = Diagnosis.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = field_path(first["loc"]) or "<top level>"
        return _reply("invalid_output", start, seconds, error=f"not a valid Diagnosis: {where}: {first['msg']}")
    except RecursionError:
        return _reply("invalid_output", start, seconds, error="not a valid Diagnosis: nested too deeply")
    (folder / OUTPUT_NAME).write_text(diagnosis.model_dump_json(), encoding="utf-8")
    return {"status": "ok", "seconds": seconds}


def _list() -> dict[str, Any]:
    from dataclasses import asdict

    from diageval.hosting.registry import list_diagnosers

    return {"ok": True, "rows": [asdict(r) for r in list_diagnosers()]}


def _reply(status: str, start: float, seconds: float | None = None, *, error: str) -> dict[str, Any]:
    return {"status": status, "error": error, "seconds": seconds if seconds is not None else time.perf_counter() - start}


def main() -> None:
    from diageval.recording.launcher import die_with_parent

    die_with_parent()  # without a box (isolation: none) a killed harness must not leave a worker behind
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # stray prints between cases go to the log, never into the protocol
    diagnoser = None
    for line in sys.stdin:
        request = json.loads(line)
        op = request.get("op")
        try:
            if op == "init":
                diagnoser, reply = _init(request)
            elif op == "prepare":
                reply = _prepare(diagnoser, request) if diagnoser is not None else {"ok": False, "error": "worker not initialised"}
            elif op == "diagnose":
                reply = _diagnose(diagnoser, request) if diagnoser is not None else {
                    "status": "diagnoser_error", "error": "worker not initialised", "seconds": 0.0}
            elif op == "list":
                reply = _list()
            else:
                reply = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as exc:
            traceback.print_exc()
            reply = {"ok": False, "status": "diagnoser_error", "error": f"{type(exc).__name__}: {exc}"}
        proto.write(json.dumps(reply) + "\n")
        proto.flush()


if __name__ == "__main__":
    main()
