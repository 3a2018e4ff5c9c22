"""``diageval data fetch``, offline: a loopback HTTP server (127.0.0.1, one thread, shut down after each
test) serves the recorded cases' files from ../shared/real-traces (or $DIAGEVAL_DATA) laid out as
``{repository}/{commit}/{path}``, the layout ``--mirror`` names. Every file arrives checked, a second
fetch downloads nothing, a corrupted file is refused by name and leaves nothing behind; a run and
``cases list`` name the cases whose traces are absent once, with the command that fetches them.

No test reaches an outside host: every fetch goes to the loopback mirror, and HTTP(S)_PROXY point at a
closed loopback port so that a request to anywhere else would fail instead of leaving the machine."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import shutil
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler
from pathlib import Path

import pytest
from click.testing import CliRunner
from recorded_fakes import recorded_case
from loopback_server import loopback_only, loopback_server  # noqa: F401 (a fixture)
from real_trace_data import real_traces_dir

from diageval.cases.load import load_case_set
from diageval.cases.model import Case
from diageval.cli import main
from diageval.recording.fetch import FetchError, fetch_command, plan_fetch, source_url
from diageval.recording.recorded import unavailable_cases

SHARED = real_traces_dir()
CASES = load_case_set().cases
RECORDED = [lc for lc in CASES if lc.case.recorded_files()]  # recorded jobs, and recorded regressions' runs
FILES = {f.path: f for lc in RECORDED for f in lc.case.recorded_files()}  # data-folder path -> RecordedFile
needs_shared = pytest.mark.skipif(
    SHARED is None, reason="the loopback mirror serves the real traces: no ../shared/real-traces beside the "
                           "checkout and $DIAGEVAL_DATA unset")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


pytestmark = pytest.mark.usefixtures("loopback_only")


def _mirror(root: Path, corrupt: tuple[str, ...] = ()) -> Path:
    """The recorded files of the shared folder under ``root/{repository}/{commit}/{source path}``; the
    data-folder paths in ``corrupt`` are served with one byte changed."""
    for path, f in FILES.items():
        target = root / f.source.repository / f.source.commit / f.source.path
        target.parent.mkdir(parents=True, exist_ok=True)
        if path in corrupt:
            data = bytearray((SHARED / path).read_bytes())
            data[len(data) // 2] ^= 0xFF
            target.write_bytes(bytes(data))
        else:
            target.symlink_to(SHARED / path)
    return root


@contextlib.contextmanager
def _serve(root: Path) -> Iterator[tuple[str, list[str]]]:
    """A static HTTP server over ``root`` on 127.0.0.1 in a thread: its base URL and the paths requested."""
    requested: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        timeout = 30  # a stuck client cannot hold the thread forever

        def do_GET(self):  # noqa: N802 (http.server's name)
            requested.append(self.path)
            super().do_GET()

        def log_message(self, *args):  # quiet
            pass

    with loopback_server(functools.partial(Handler, directory=str(root))) as url:
        yield url, requested


def _fetch(*args: str):
    return CliRunner().invoke(main, ["data", "fetch", *args])


def test_every_recorded_file_has_one_source_url():
    """Each data-folder path is named with one checksum and one source by the cases that share it."""
    assert len(RECORDED) >= 8
    planned = plan_fetch(CASES)
    assert sorted(p.path for p in planned) == sorted(FILES)
    for p in planned:
        src = FILES[p.path].source
        assert p.url == f"https://github.com/{src.repository}/raw/{src.commit}/{src.path}"
    # a recorded regression's files are its runs': both of the kineto-doc before/after pair are fetched
    pair = [p for p in planned if "kineto-doc-trace-order-pair" in p.cases]
    assert len(pair) == 2 and {p.path.split("/")[1] for p in pair} == {"kineto-doc-before-fix", "kineto-doc-after-fix"}
    shared = [p for p in planned if len(p.cases) > 1]  # the pageable-copy trace and its derived abstain case
    assert shared and all(len(p.case_files) == len(p.cases) for p in shared)
    assert source_url(FILES[planned[0].path], "http://127.0.0.1:1/m/").startswith("http://127.0.0.1:1/m/")


def test_unknown_and_live_cases_are_refused():
    with pytest.raises(FetchError, match="no such case: nope"):
        plan_fetch(CASES, ["nope"])
    live = next(lc.case.id for lc in CASES if not lc.case.recorded_files())
    with pytest.raises(FetchError, match=f"not a recorded case.*{live}"):
        plan_fetch(CASES, [live])
    result = _fetch("nope", "--data", "/nonexistent-never-written")
    assert result.exit_code == 1 and "no such case: nope" in result.output


@needs_shared
def test_fetch_downloads_every_file_checked_then_resumes_with_nothing_to_do(tmp_path):
    data = tmp_path / "data"
    with _serve(_mirror(tmp_path / "mirror")) as (url, requested):
        first = _fetch("--data", str(data), "--mirror", url)
        assert first.exit_code == 0, first.output
        assert sorted(requested) == sorted(
            f"/{f.source.repository}/{f.source.commit}/{f.source.path}" for f in FILES.values())
        assert f"{len(FILES)} downloaded" in first.output and "0 failed" in first.output
        for path, f in FILES.items():
            assert _sha256(data / path) == f.sha256, path
        assert unavailable_cases(CASES, [data]) == []
        requested.clear()
        second = _fetch("--data", str(data), "--mirror", url)
        assert second.exit_code == 0, second.output
        assert requested == [] and f"0 downloaded (0.0 MB), {len(FILES)} already present" in second.output
    stray = [p for p in data.rglob("*") if p.is_file() and p.relative_to(data).as_posix() not in FILES]
    assert stray == []  # no temporary file left beside the traces


@needs_shared
def test_a_corrupted_file_is_refused_by_name_and_nothing_is_left(tmp_path):
    case = next(lc for lc in RECORDED if len(lc.case.recorded.files) == 1)
    bad = case.case.recorded.files[0].path
    data = tmp_path / "data"
    with _serve(_mirror(tmp_path / "mirror", corrupt=(bad,))) as (url, requested):
        result = _fetch(case.case.id, "--data", str(data), "--mirror", url, "--retries", "1")
    assert result.exit_code == 1
    assert len(requested) == 2  # the first try and one retry
    error = next(line for line in result.output.splitlines() if line.startswith("error:"))
    assert bad in error and "refused" in error and FILES[bad].sha256 in error and str(case.path) in error
    assert not (data / bad).exists()
    assert [p for p in data.rglob("*") if p.is_file()] == []  # not the bad file, not a temporary one


@needs_shared
def test_one_bad_file_fails_the_command_but_the_others_arrive(tmp_path):
    bad = next(iter(FILES))
    data = tmp_path / "data"
    with _serve(_mirror(tmp_path / "mirror", corrupt=(bad,))) as (url, _):
        result = _fetch("--data", str(data), "--mirror", url, "--retries", "0")
    assert result.exit_code == 1 and f"{len(FILES) - 1} downloaded" in result.output and "1 failed" in result.output
    assert not (data / bad).exists()
    assert all((data / p).is_file() for p in FILES if p != bad)


def test_a_file_the_mirror_lacks_is_named_with_the_http_status(tmp_path):
    case = RECORDED[0]
    (tmp_path / "mirror").mkdir()
    with _serve(tmp_path / "mirror") as (url, _):
        result = _fetch(case.case.id, "--data", str(tmp_path / "data"), "--mirror", url, "--retries", "0")
    assert result.exit_code == 1
    assert f"error: {case.case.recorded.files[0].path}: {url}/" in result.output and "HTTP 404" in result.output


def test_cases_list_names_the_absent_once_with_the_fetch_command(tmp_path):
    empty = tmp_path / "empty"
    result = CliRunner().invoke(main, ["cases", "list", "--data", str(empty)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "diageval data fetch" in line]
    assert lines == [f"{len(RECORDED)} recorded case(s) whose traces are not on this machine (requires: data "
                     f"folder (absent)); get them with `{fetch_command(data=empty)}`"]
    marked = {line.split()[0] for line in result.output.splitlines()
              if "data folder (absent)" in line and line not in lines}  # the table's rows
    assert marked == {lc.case.id for lc in RECORDED}
    listed = CliRunner().invoke(main, ["cases", "list", "--data", str(SHARED)]) if SHARED else None
    if listed is not None:  # with every file present: no mark, no line
        assert "data folder (absent)" not in listed.output and "diageval data fetch" not in listed.output


def _recorded_case(path: str, sha: str) -> Case:
    return Case.model_validate(recorded_case(path, sha))


def test_a_run_names_the_absent_once_and_runs_them_when_resumed_after_the_fetch(tmp_path):
    from gpu_traces import gpu_trace
    from run_fakes import make_case_set

    from diageval.recording import RecordingPolicy
    from diageval.reports.run_outcome import format_run_outcome
    from run_fakes import run_with
    from diageval.run.store import RunStore

    trace = gpu_trace(tmp_path / "made" / "rank0.json.gz")
    data = tmp_path / "data"
    case_set = make_case_set([_recorded_case("job/rank0.json.gz", _sha256(trace))])

    def run():
        return run_with(
            "null", case_set, cases_dir=tmp_path / "cases", out_dir=tmp_path / "runs", run_id="r",
            recording=RecordingPolicy(data_dir=data, cache_dir=tmp_path / "cache"),
            progress=None, cuda_device_count=lambda: 0)

    outcome = run()
    command = fetch_command(data=data)
    text = format_run_outcome(outcome, fetch_command=command)
    lines = [line for line in text.splitlines() if "rec-case" in line]
    assert len(lines) == 1 and lines[0].startswith("1 unavailable (") and f"`{command}`" in lines[0]
    many = dataclasses.replace(outcome, results=[outcome.results[0].model_copy(update={"case_id": f"c{i}"})
                                                 for i in range(7)])
    lines = [line for line in format_run_outcome(many).splitlines() if "unavailable (" in line]
    assert lines == ["7 unavailable (recorded traces not on this machine: c0, c1, c2, c3, c4 and 2 more); "
                     "get them with `diageval data fetch`, then run again"]
    (data / "job").mkdir(parents=True)
    shutil.copy(trace, data / "job" / "rank0.json.gz")  # what the fetch would have put there
    outcome = run()
    (result,) = RunStore(outcome.run_dir).read_results()
    assert result.status != "unavailable" and outcome.counts["resumed"] == 0
    assert "unavailable" not in format_run_outcome(outcome, fetch_command=command)


def test_the_data_folders(monkeypatch, tmp_path):
    from diageval import paths

    monkeypatch.delenv("DIAGEVAL_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache = paths.data_dir()
    assert cache == tmp_path / "xdg" / "diageval" / "real-traces"
    shared = paths.SOURCE_ROOT.parent / "shared" / "real-traces"
    assert paths.data_dirs() == ([cache, shared] if shared.is_dir() else [cache])  # the shared one read-only, after
    assert paths.data_dirs(tmp_path / "d") == [tmp_path / "d"]
    monkeypatch.setenv("DIAGEVAL_DATA", str(tmp_path / "env"))
    assert paths.data_dir() == tmp_path / "env" and paths.data_dirs() == [tmp_path / "env"]
