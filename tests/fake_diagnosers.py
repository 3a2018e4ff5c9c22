"""Diagnosers that misbehave on request, for the run-pipeline tests.

:class:`ScriptedDiagnoser` reads the first line of the bundle's ``logs/rank0.log`` as its instruction
(the fakes write it there): ``hang``, ``crash``, ``exit``, ``bad``, ``print``, ``sleep <s>``, anything
``flip`` (right on its 1st, 3rd... call, a confident wrong cause on the others: it counts its earlier calls in
``$FAKE_DIAGNOSER_CALLS``), anything else -> claim ``compute.straggler_rank``. If ``$FAKE_DIAGNOSER_CALLS`` names a file, every call appends
``<pid> <instruction>`` to it, so tests can count what ran where (the harness shows a diagnoser random
bundle ids, so the instruction is what names a case to the test). The file is outside any sandbox, so
tests that count calls run with ``isolation="none"``.
"""

from __future__ import annotations

import os
import sys
import time

from diageval.bundle.model import EvidenceBundle
from diageval.diagnosers.base import DiagnoserUnavailable
from diageval.diagnosis import Diagnosis, Finding


def instruction(bundle: EvidenceBundle) -> str:
    log = bundle.root / "logs" / "rank0.log"
    return log.read_text().splitlines()[0].strip() if log.is_file() else ""


def _calls_of(what: str) -> int:
    """Earlier calls told ``what``, from ``$FAKE_DIAGNOSER_CALLS`` (0 without it)."""
    path = os.environ.get("FAKE_DIAGNOSER_CALLS")
    if not path or not os.path.exists(path):
        return 0
    with open(path) as fh:
        return sum(line.split()[1:2] == [what] for line in fh)


def note_call(what: str) -> None:
    path = os.environ.get("FAKE_DIAGNOSER_CALLS")
    if path:
        with open(path, "a") as fh:
            # the process that diagnosed, what it was told, and its parent: the worker that hosts the diagnoser between
            # cases (another's diagnoser runs each case in a child the worker forks: diageval.hosting.worker_process)
            fh.write(f"{os.getpid()} {what.replace(' ', '_') or '-'} {os.getppid()}\n")


class ScriptedDiagnoser:
    name = "scripted"
    version = "1"
    prepared = False

    def prepare(self, corpus) -> None:  # must never be called: this diagnoser is not a reference
        type(self).prepared = True
        note_call("PREPARE-CALLED")

    def diagnose(self, bundle: EvidenceBundle):
        what = instruction(bundle)
        earlier = _calls_of(what)
        note_call(what)
        if what == "flip" and earlier % 2:
            return Diagnosis(findings=[Finding(category="input.dataloader_starvation", confidence=0.9)])
        if what == "hang":
            time.sleep(600)
        if what == "crash":
            raise ValueError("cannot parse this trace")
        if what == "exit":
            os._exit(3)
        if what == "bad":
            return {"findings": [{"category": "compute.straggler_rank", "confidence": 7}]}
        if what == "print":
            print("hello from the diagnoser")
            print("a warning", file=sys.stderr)
        if what.startswith("sleep "):
            time.sleep(float(what.split()[1]))
        return Diagnosis(findings=[Finding(category="compute.straggler_rank", confidence=0.7, ranks=[1])])


class UnavailableDiagnoser:
    name = "unavailable"
    version = "1"

    def __init__(self) -> None:
        raise DiagnoserUnavailable("needs the optional package 'nothere' (pip install diageval[nothere])")

    def diagnose(self, bundle):
        raise AssertionError("never constructed")


class NetworkDiagnoser:
    """Declares that it calls a model endpoint: the harness must refuse it unless the run allows network."""

    name = "needs-net"
    version = "1"
    needs_network = True
    claims = ("input.dataloader_starvation",)

    def diagnose(self, bundle):
        return Diagnosis()
