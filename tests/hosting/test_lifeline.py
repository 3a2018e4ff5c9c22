"""A box ends with the harness process that started it, however and whenever that dies, and only then
(``diageval.hosting.lifeline``): not when the thread that started it ends, and not later than the harness.

Each test runs a small harness in a child process that starts a box through ``Box.spawn`` (the one start path) and
then kills itself with SIGKILL; the box's processes carry a token of the test's own in their command lines, so the
test finds every one of them, the box's PID 1 and what runs inside included, wherever it was reparented."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from processes import alive
from tests.recording.test_kill9 import _read

from diageval.hosting.sandbox import probe

KINDS = [pytest.param("bwrap", marks=pytest.mark.skipif(probe() is not None, reason=f"no sandbox here: {probe()}")), "none"]

HARNESS = """
import os, signal, subprocess, sys, threading, time
from diageval.hosting.limits import BoxGroups
from diageval.hosting.sandbox import Box, SandboxPolicy
kind, when, token = sys.argv[1:4]
# no control groups: any diageval start on this machine (remove_stale_groups) kills what is left in a dead harness's
# groups, and would hide a survivor at a time of its own (measured: tests of other checkouts did, within 60 s)
BoxGroups.create = classmethod(lambda cls, limits: cls(limits))
box = Box(SandboxPolicy(hidden=()) if kind == "bwrap" else None, env_policy=SandboxPolicy(hidden=()))
started = box.host_out / "started"
program = "import sys, time; open(sys.argv[1], 'w').close(); time.sleep(300)"
inner = str(box.inner(started))
procs = []

def start():
    procs.append(box.spawn([sys.executable, "-c", program, inner, token], box.host_out, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # a survivor holds no pipe of ours

def wait_started():
    deadline = time.monotonic() + 60
    while not started.exists():
        assert time.monotonic() < deadline and procs[0].poll() is None, "the box never started"
        time.sleep(0.01)

if when == "at once":  # dies while the box is starting: before bwrap can arm its --die-with-parent
    start()
    os.kill(os.getpid(), signal.SIGKILL)
t = threading.Thread(target=lambda: (start(), wait_started()))  # the thread that starts the box ends
t.start()
t.join()
time.sleep(0.5)
print("alive" if procs[0].poll() is None else f"ended with {procs[0].returncode}", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _with_token(token: str) -> list[int]:
    return [int(d.name) for d in Path("/proc").glob("[0-9]*") if token.encode() in _read(f"/proc/{d.name}/cmdline")
            and alive(int(d.name))]


def _left_after_harness(tmp_path: Path, kind: str, when: str) -> tuple[str, dict[int, bytes]]:
    """(what the harness printed, the token's processes still alive up to 60 s after it died)."""
    token = f"lifeline-token-{tmp_path.name}-{os.getpid()}"
    script = tmp_path / "harness.py"
    script.write_text(textwrap.dedent(HARNESS))
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, str(script), kind, when, token], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == -signal.SIGKILL, done.stderr
    deadline = time.monotonic() + 60  # as test_kill9: the box ends within a second here; a minute fails a survivor
    while _with_token(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {p: _read(f"/proc/{p}/cmdline")[:120] for p in _with_token(token)}
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return done.stdout.strip(), left


@pytest.mark.parametrize("kind", KINDS)
def test_a_harness_killed_while_its_box_starts_leaves_no_process(tmp_path, kind):
    _, left = _left_after_harness(tmp_path, kind, "at once")
    assert left == {}, f"processes outlived the killed harness: {left}"


@pytest.mark.parametrize("kind", KINDS)
def test_a_box_outlives_the_thread_that_started_it_and_ends_with_the_harness(tmp_path, kind):
    said, left = _left_after_harness(tmp_path, kind, "from a thread")
    assert said == "alive"
    assert left == {}, f"processes outlived the killed harness: {left}"


def test_what_a_box_s_first_process_left_behind_ends_with_it(tmp_path):
    """Without a sandbox (no PID namespace to end a ``setsid`` daemon) the box's first process still takes along
    whatever its command left running when it exits, and exits with the command's own status."""
    from diageval.hosting.sandbox import Box, SandboxPolicy

    token = f"lifeline-daemon-{tmp_path.name}-{os.getpid()}"
    box = Box(None, parent=tmp_path, env_policy=SandboxPolicy(hidden=()))
    try:
        daemon = f"setsid {sys.executable} -c 'import time; time.sleep(300)' {token} >/dev/null 2>&1 &"
        proc = box.spawn(["/bin/sh", "-c", daemon + " exit 3"], box.host_out, stdin=subprocess.DEVNULL)
        assert proc.wait(timeout=60) == 3
        left = _with_token(token)  # before box.remove(), which also ends what is in the box's control groups
        killed = box.spawn(["/bin/sh", "-c", "kill -TERM $$"], box.host_out, stdin=subprocess.DEVNULL)
        assert killed.wait(timeout=60) == -signal.SIGTERM
    finally:
        box.remove()
        for p in _with_token(token):
            os.kill(p, signal.SIGKILL)
    assert left == []
