"""SIGKILL of ``run``, ``diagnose`` and ``record`` leaves no process behind, and the next start removes
the temp folders the killed one could not (issue 8: clean processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from locations import TESTS
from processes import alive
from run_fakes import write_bundle

from diageval.hosting.sandbox import HOST_PREFIX, probe

needs_bwrap = pytest.mark.skipif(probe() is not None, reason=f"no sandbox can start here: {probe()}")


def _descendants(pid: int) -> set[int]:
    """Every live process whose parent chain leads to ``pid`` (host pids, boxes included)."""
    parents: dict[int, int] = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            parents[int(d.name)] = int(fields[1])
    out: set[int] = set()
    frontier = {pid}
    while frontier:
        children = {c for c, p in parents.items() if p in frontier and c not in out}
        out |= children
        frontier = children
    return out


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:
        return b""


def in_box(pid: int) -> bool:
    """The process runs inside a box and is not bwrap: in a PID namespace other than this test's (the outer bwrap and
    the box's first process, whose command lines name the diagnoser too, run in this one; the inner bwrap does not)."""
    try:
        inside = os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
    except OSError:
        return False
    return inside and _read(f"/proc/{pid}/comm").strip() != b"bwrap"


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22): with the pid, what tells
    a process from a later one the kernel gave the same pid (32768 pids wrap on a busy CI machine)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _kill_and_check(proc: subprocess.Popen, tree: set[int]) -> None:
    started = {pid: _start_time(pid) for pid in tree}
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)

    def survivors() -> list[int]:  # the same processes (pid and start time), not a pid the kernel gave out again
        return [p for p in tree if alive(p) and started[p] is not None and _start_time(p) == started[p]]

    # The box's first process sees the harness's end of its lifeline close and kills bwrap and the box's PID 1, and the
    # kernel the rest (diageval.hosting.lifeline): give it a moment, no more. How long a moment: here, alone, under a
    # second; in CI's test phase (two workers, recordings beside) the same tests' trees were gone after up to 7 s
    # (ci8). A minute still fails a process that outlives the command (the diagnosers these tests kill sleep 300 s).
    deadline = time.monotonic() + 60
    while survivors() and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {p: _describe(p) for p in survivors()}
    assert not left, f"processes outlived the killed command: {left}"


def _describe(pid: int) -> str:
    """What a survivor is: its state, parent and command line (for the failure's message)."""
    status = dict(line.split(":", 1) for line in _read(f"/proc/{pid}/status").decode().splitlines() if ":" in line)
    parent = status.get("PPid", "?").strip()

    def command(p: object, width: int) -> bytes:
        return _read(f"/proc/{p}/cmdline").replace(NUL, b" ")[:width]

    return f"state {status.get('State', '?').strip()}, parent {parent} ({command(parent, 80)!r}), {command(pid, 160)!r}"


NUL = bytes(1)


def _stale_boxes(pid: int, parent: Path) -> list[Path]:
    return list(parent.glob(f"{HOST_PREFIX}{pid}-*"))


RUNNER = """
import sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from run_fakes import FakeEvidence, make_case, make_case_set, run_with
script = {script!r}
case_set = make_case_set([make_case(c) for c in script])
run_with({spec!r}, case_set, cases_dir=None, out_dir=Path({runs!r}), run_id="k", timeout=120,
         evidence_fn=FakeEvidence(Path({bundles!r}), log_text=script), cuda_device_count=lambda: 0)
"""


@needs_bwrap
@pytest.mark.parametrize("kind", ["cmd", "in_process"])
def test_kill9_of_run_leaves_no_process_and_the_next_start_cleans_up(tmp_path, kind):
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import subprocess, sys, time\nsubprocess.Popen(['sleep', '300'], start_new_session=True)\ntime.sleep(300)\n")
    spec = (f"cmd:{sys.executable} {sleeper} {{bundle}} {{out}}" if kind == "cmd" else "fake_diagnosers:ScriptedDiagnoser")
    script = {"k1": "sleep 300", "k2": "ok"}
    runner = tmp_path / "runner.py"
    runner.write_text(textwrap.dedent(RUNNER.format(tests=str(TESTS), script=script, spec=spec, runs=str(tmp_path / "runs"),
                                                    bundles=str(tmp_path / "bundles"))))
    # the boxes' folders in a temp folder of this test's own: any diageval start elsewhere on the machine (another
    # test worker's) removes a dead harness's stale boxes from the shared ones, between the kill and the look below
    private = tmp_path / "tmp"
    private.mkdir()
    proc = subprocess.Popen([sys.executable, str(runner)], stderr=subprocess.PIPE,
                            env={**os.environ, "TMPDIR": str(private)})
    target = b"sleeper.py" if kind == "cmd" else b"diageval.hosting.worker"
    tree: set[int] = set()

    def diagnosing() -> bool:
        nonlocal tree
        assert proc.poll() is None, proc.stderr.read().decode()
        tree = _descendants(proc.pid)
        cmdlines = [_read(f"/proc/{p}/cmdline") for p in tree if in_box(p)]
        return any(target in c for c in cmdlines) and (kind != "cmd" or any(b"sleep\x00300" in c for c in cmdlines))

    _wait_for(diagnosing, 60, "the diagnoser never started")
    time.sleep(0.3)
    tree = _descendants(proc.pid)
    assert _stale_boxes(proc.pid, private)
    _kill_and_check(proc, tree)
    assert _stale_boxes(proc.pid, private)  # SIGKILL: nobody could clean up

    from diageval.hosting.sandbox import remove_stale_boxes

    remove_stale_boxes(private)  # what every run, diagnose and record does first, where it looks
    assert not _stale_boxes(proc.pid, private)


@needs_bwrap
def test_kill9_of_diagnose_leaves_no_process(tmp_path):
    bundle = write_bundle(tmp_path / "b", "x")
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import os, time\nif os.fork() == 0:\n    os.setsid()\ntime.sleep(300)\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "diageval.cli", "diagnose", "-d", f"cmd:{sys.executable} {sleeper} {{bundle}} {{out}}", str(bundle)],
        stderr=subprocess.PIPE, cwd=tmp_path,
    )
    tree: set[int] = set()

    def diagnosing() -> bool:
        nonlocal tree
        assert proc.poll() is None, proc.stderr.read().decode()
        tree = _descendants(proc.pid)
        return sum(b"sleeper.py" in _read(f"/proc/{p}/cmdline") and in_box(p) for p in tree) >= 2  # and its setsid child

    _wait_for(diagnosing, 60, "the diagnoser never started")
    _kill_and_check(proc, _descendants(proc.pid))


@pytest.mark.slow
def test_kill9_of_record_leaves_no_rank_and_the_next_record_cleans_up(tmp_path):
    env = {**os.environ, "DIAGEVAL_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen([sys.executable, "-m", "diageval.cli", "record", "mlp-ddp-healthy", "--device", "cpu"],
                            env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    evidence = tmp_path / "home" / "bundles" / "evidence"

    def ranks_running() -> bool:
        assert proc.poll() is None, proc.stderr.read().decode()
        return len(_descendants(proc.pid)) >= 3 and any(evidence.glob(".tmp-*"))  # forkserver + 2 ranks

    _wait_for(ranks_running, 120, "the ranks never started")
    time.sleep(0.5)
    _kill_and_check(proc, _descendants(proc.pid))
    leftovers = list(evidence.glob(f".tmp-{proc.pid}-*"))
    assert leftovers  # SIGKILL: nobody could clean up

    from diageval.fileio import remove_stale_temp_dirs
    from diageval.recording.record import TMP_PREFIX

    remove_stale_temp_dirs(evidence, TMP_PREFIX)  # what the next recording does first
    assert not [p for p in leftovers if p.exists()]


def record_a_long_job(tmp_path: Path, env: dict[str, str]) -> subprocess.Popen:
    """``diageval record`` of a healthy 2-rank job of 10000 steps (minutes), from a corpus of that one case."""
    import shutil

    from diageval.paths import builtin_cases_dir

    cases = tmp_path / "cases"
    cases.mkdir()
    shutil.copy(builtin_cases_dir() / "taxonomy.yaml", cases / "taxonomy.yaml")
    (cases / "long.yaml").write_text(
        "id: long-job\ntitle: a long healthy job\nworkload: {name: mlp_ddp, world_size: 2, steps: 10000}\nfaults: []\n"
        "labels: {causes: [], symptoms: [], expect: healthy}\nrequires: {device: any}\n")
    return subprocess.Popen([sys.executable, "-m", "diageval.cli", "record", "long-job", "--cases", str(cases),
                             "--device", "cpu"], env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)


def test_kill9_of_record_ends_a_long_job_s_ranks_too(tmp_path):
    """The ranks' parents watch the launcher: SIGKILL of ``record`` during a long job (10000 steps, minutes)
    ends its ranks within seconds, not when the job would have ended."""
    proc = record_a_long_job(tmp_path, {**os.environ, "DIAGEVAL_HOME": str(tmp_path / "home")})
    _wait_for(lambda: len(_descendants(proc.pid)) >= 5 or proc.poll() is not None, 120, "the ranks never started")
    assert proc.poll() is None, proc.stderr.read().decode()
    time.sleep(2.0)  # into the job's steps
    _kill_and_check(proc, _descendants(proc.pid))
