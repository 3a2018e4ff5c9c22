"""Issue 44, item 6: a ``diagnose`` or ``record`` killed with SIGKILL left, in the temp folder, an empty
``diageval-diagnose-*`` folder and one ``pymp-*`` (multiprocessing's sockets) per recording, neither naming its
owner. Now each lies in a folder named with its owner's pid, and the next start (``remove_stale_boxes``, which
``run``, ``diagnose`` and a Ray slot call first) removes those whose owner is dead, never a live one.

Each test kills a real child process with SIGKILL; TMPDIR points the child (and the sweep) at the test's own
temp folder, so the machine's shared one is neither read nor touched."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from run_fakes import write_bundle
from test_kill9 import _descendants, _kill_and_check, _read, _wait_for, needs_bwrap, record_a_long_job

from diageval.fileio import owned_temp_dir
from diageval.hosting.sandbox import DIAGNOSE_PREFIX, HOST_PREFIX, remove_stale_boxes
from diageval.recording.launcher import MP_PREFIX


def _env(tmp: Path, **more: str) -> dict[str, str]:
    tmp.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmp), **more}


@pytest.fixture
def short_tmp():
    """A temp folder of this test's own with a short path: multiprocessing's sockets live under it, and a socket's
    path holds 107 bytes (pytest's tmp_path is too long for that once the owned folder is added)."""
    folder = Path(tempfile.mkdtemp(prefix="dgk9-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@needs_bwrap
def test_kill9_of_diagnose_leaves_its_folder_named_for_it_and_the_next_start_removes_it(tmp_path):
    tmp = tmp_path / "tmp"
    bundle = write_bundle(tmp_path / "b", "x")
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\ntime.sleep(300)\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "diageval.cli", "diagnose", "-d", f"cmd:{sys.executable} {sleeper} {{bundle}} {{out}}",
         str(bundle)], stderr=subprocess.PIPE, cwd=tmp_path, env=_env(tmp))

    def diagnosing() -> bool:
        assert proc.poll() is None, proc.stderr.read().decode()
        # any process naming the diagnoser but bwrap and a child of `diagnose` not yet exec-ed (whose command line
        # is still the harness's, which names it too: measured once in 9 runs, before the output folder was made).
        # The box's first process (diageval.hosting.lifeline) names it from its start, so this kills `diagnose`
        # while its box starts, where bwrap's --die-with-parent is not yet armed (the defect this test caught,
        # 2026-12-06); test_kill9 kills it with the diagnoser running
        harness = _read(f"/proc/{proc.pid}/cmdline")
        return any(b"sleeper.py" in cmd and cmd != harness and _read(f"/proc/{p}/comm").strip() != b"bwrap"
                   for p in _descendants(proc.pid) for cmd in [_read(f"/proc/{p}/cmdline")])

    _wait_for(diagnosing, 60, "the diagnoser never started")
    mine = list(tmp.glob(f"{DIAGNOSE_PREFIX}{proc.pid}-*"))
    assert len(mine) == 1, sorted(p.name for p in tmp.iterdir())  # the output folder names its owner
    _kill_and_check(proc, _descendants(proc.pid))
    assert mine[0].is_dir()  # SIGKILL: nobody could clean up
    live = owned_temp_dir(tmp, DIAGNOSE_PREFIX)  # another diagnose, alive (this process): kept
    removed = remove_stale_boxes(tmp)
    assert mine[0] in removed and not mine[0].exists()
    assert live.is_dir() and live not in removed
    assert [p for p in tmp.iterdir() if p.name.startswith((DIAGNOSE_PREFIX, HOST_PREFIX)) and p != live] == []


def test_kill9_of_record_leaves_multiprocessing_s_folders_inside_one_owned_folder_the_next_start_removes(tmp_path,
                                                                                                         short_tmp):
    tmp = short_tmp
    proc = record_a_long_job(tmp_path, _env(tmp, DIAGEVAL_HOME=str(tmp_path / "home")))
    _wait_for(lambda: len(_descendants(proc.pid)) >= 5 or proc.poll() is not None, 120, "the ranks never started")
    assert proc.poll() is None, proc.stderr.read().decode()
    time.sleep(2.0)  # into the job's steps: the ranks have made what they make
    _kill_and_check(proc, _descendants(proc.pid))
    assert list(tmp.glob("pymp-*")) == []  # none loose in the temp folder, with no owner to tell
    owned = list(tmp.glob(f"{MP_PREFIX}{proc.pid}-*"))
    assert len(owned) == 1 and list(owned[0].glob("pymp-*")), sorted(str(p) for p in tmp.rglob("*"))
    live = owned_temp_dir(tmp, MP_PREFIX)  # a recording still going (this process): kept
    removed = remove_stale_boxes(tmp)
    assert owned[0] in removed and not owned[0].exists()
    assert live.is_dir() and live not in removed


RANKS = """
import os, sys, tempfile
from pathlib import Path
from diageval.recording.launcher import run_ranks
if __name__ == "__main__":
    out = Path(sys.argv[1])
    run_ranks(os.getpid, [(), ()], [out / "r0.log", out / "r1.log"], timeout_s=120, what="t")
    run_ranks(os.getpid, [()], [out / "r2.log"], timeout_s=120, what="t")  # a second recording reuses the folder
    print(sorted(p.name for p in Path(tempfile.gettempdir()).iterdir()))
"""


def test_a_launcher_that_exits_normally_leaves_nothing_and_sweeps_a_dead_one_s_folder(tmp_path, short_tmp):
    tmp = short_tmp
    dead = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stale = tmp / f"{MP_PREFIX}{dead.pid}-x1y2z3"
    (stale / "pymp-abc").mkdir(parents=True)
    (stale / "pymp-abc" / "listener-1").write_text("")
    dead.send_signal(signal.SIGKILL)
    dead.wait()
    script = tmp_path / "ranks.py"
    script.write_text(textwrap.dedent(RANKS))
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "logs")], env=_env(tmp), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    during = eval(done.stdout.strip().splitlines()[-1])  # noqa: S307 - our own script's list of names
    assert [n for n in during if n.startswith(MP_PREFIX)] and not [n for n in during if n.startswith("pymp-")]
    assert not stale.exists()  # the dead launcher's folder went at this one's start
    assert sorted(p.name for p in tmp.iterdir() if p.name.startswith((MP_PREFIX, "pymp-"))) == []  # and its own at exit
