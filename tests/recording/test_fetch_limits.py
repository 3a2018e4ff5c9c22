"""Issue 44, item 6: ``diageval data fetch`` against a hostile mirror. A server on 127.0.0.1 that never stops
sending is cut off at the file's cap and refused without a retry; one that announces more than the cap is
refused before its body; SIGTERM or Ctrl-C in the middle of a download leaves no temporary file; a case's
``repository`` must be ``owner/name``.

The servers here are loopback only and bounded: each stops after ``SERVER_LIMIT`` bytes or ``SERVER_SECONDS``,
whichever comes first, and is shut down after its test."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from loopback_server import loopback_only, loopback_server  # noqa: F401 (a fixture)
from real_trace_data import real_traces_dir
from recorded_fakes import recorded_case
import yaml
from pydantic import ValidationError

from diageval.bundle.importer import MAX_TRACE_BYTES
from diageval.cases.load import load_case_set, parse_case_file
from diageval.cases.model import TraceSource
from diageval.paths import default_taxonomy_path
from diageval.recording.fetch import PlannedFile, fetch_files, plan_fetch

SERVER_LIMIT = 48 << 20
SERVER_SECONDS = 30.0
BLOCK = 64 << 10


pytestmark = pytest.mark.usefixtures("loopback_only")


class Served:
    def __init__(self) -> None:
        self.requests = 0
        self.sent = 0


@contextlib.contextmanager
def endless(*, announce: int | None = None, pause: float = 0.0) -> Iterator[tuple[str, Served]]:
    """A server that answers every GET with 200 and bytes that never end (up to its bounds); ``announce``
    sets a Content-Length, ``pause`` waits between blocks (a slow download to interrupt)."""
    served = Served()

    class Handler(BaseHTTPRequestHandler):
        timeout = 30

        def do_GET(self):  # noqa: N802 (http.server's name)
            served.requests += 1
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            if announce is not None:
                self.send_header("Content-Length", str(announce))
            self.end_headers()
            start = time.monotonic()
            block = b"x" * BLOCK
            try:
                while served.sent < SERVER_LIMIT and time.monotonic() - start < SERVER_SECONDS:
                    self.wfile.write(block)
                    served.sent += len(block)
                    if pause:
                        time.sleep(pause)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client hung up: what a cap does
            self.close_connection = True

        def log_message(self, *args):
            pass

    with loopback_server(Handler) as url:
        yield url, served


def planned(url: str, max_bytes: int) -> PlannedFile:
    return PlannedFile(path="job/rank0.json.gz", sha256="0" * 64, url=f"{url}/o/r/abcdef1/t.json.gz",
                       cases=["rec-case"], case_files=["cases/rec-case.yaml"], max_bytes=max_bytes)


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def test_an_endless_download_stops_at_the_cap_is_refused_once_and_leaves_nothing(tmp_path):
    cap = 1 << 20
    with endless() as (url, served):
        (result,) = fetch_files([planned(url, cap)], tmp_path / "data", retries=3)
    assert result.status == "failed"
    assert "job/rank0.json.gz: refused: " in result.error and f"sent more than the cap of {cap} bytes" in result.error
    assert served.requests == 1  # a server that sends too much is not asked again
    assert served.sent < SERVER_LIMIT // 2  # cut off near the cap (plus what the sockets buffered), not at the server's end
    assert files_under(tmp_path / "data") == []  # no partial file, no temporary one


def test_a_download_announcing_more_than_the_cap_is_refused_before_its_body(tmp_path):
    with endless(announce=10 << 30, pause=0.05) as (url, served):
        (result,) = fetch_files([planned(url, 1 << 20)], tmp_path / "data", retries=0)
    assert result.status == "failed" and "announced 10737418240 bytes, over the cap of 1048576" in result.error
    assert files_under(tmp_path / "data") == []


def test_every_built_in_file_is_capped_at_its_pinned_size():
    """Every recorded file of the corpus pins its size beside its sha256, and the download is capped at exactly
    that; where the shared copy is here, the pinned size is its size."""
    cases = load_case_set().cases
    files = {f.path: f for lc in cases for f in lc.case.recorded_files()}
    assert files and all(f.size for f in files.values()), [p for p, f in files.items() if not f.size]
    plan = plan_fetch(cases)
    assert {p.path: p.max_bytes for p in plan} == {path: f.size for path, f in files.items()}
    shared = real_traces_dir()
    if shared is None:
        pytest.skip("../shared/real-traces is not here: the pinned sizes are not compared with the files")
    here = {path: (shared / path).stat().st_size for path in files if (shared / path).is_file()}
    assert here and {path: files[path].size for path in here} == here


def test_a_file_without_a_size_is_capped_at_the_largest_trace_the_import_reads(tmp_path):
    from diageval.cases.model import Case

    case = Case.model_validate(RECORDED_CASE)
    assert case.recorded_files()[0].size is None
    (plan,) = plan_fetch([type("L", (), {"case": case, "path": tmp_path / "rec-case.yaml"})()])
    assert plan.max_bytes == MAX_TRACE_BYTES


def test_a_source_path_outside_the_repository_is_refused(tmp_path):
    from pydantic import ValidationError

    from diageval.cases.model import Case

    for bad in ("../../other/repo/raw/x", "/etc/passwd", "a/../../b"):
        case = {**RECORDED_CASE, "recorded": {**RECORDED_CASE["recorded"], "files": [
            {**RECORDED_CASE["recorded"]["files"][0], "source": {"repository": "o/r", "commit": "abcdef1", "path": bad,
                                                                  "licence": "MIT"}}]}}
        with pytest.raises(ValidationError, match="inside the repository"):
            Case.model_validate(case)


RECORDED_CASE = recorded_case()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_a_download_leaves_no_temporary_file(sig, tmp_path):
    cases = tmp_path / "cases"
    cases.mkdir()
    shutil.copy(default_taxonomy_path(), cases / "taxonomy.yaml")
    (cases / "rec-case.yaml").write_text(yaml.safe_dump(RECORDED_CASE, sort_keys=False), encoding="utf-8")
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k != "DIAGEVAL_DATA_MIRROR"}
    with endless(pause=0.02) as (url, served):
        proc = subprocess.Popen(
            [sys.executable, "-c", "from diageval.cli import main; main()", "data", "fetch", "rec-case",
             "--cases", str(cases), "--data", str(data), "--mirror", url, "--retries", "0"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            # Ctrl-C as a person's terminal delivers it: a shell that started the test run in the background (CI's,
            # nohup) hands its children SIGINT ignored, and an ignored SIGINT never interrupts the fetch
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            deadline = time.monotonic() + 60
            while not any(p.stat().st_size > 0 for p in files_under(data)):  # the temporary file is being written
                assert proc.poll() is None, proc.communicate()[0].decode()
                assert time.monotonic() < deadline, "the download never started"
                time.sleep(0.02)
            proc.send_signal(sig)
            output = proc.communicate(timeout=30)[0].decode()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130, output  # stopped as an interrupt, not killed by the signal
    assert "Traceback" not in output
    assert files_under(data) == []


@pytest.mark.parametrize("repository", ["o", "o/", "/r", "o/r/x", "../etc", "o/..", "o/.", "-o/r", "o-/r",
                                        "o--x/r", "evil.com/r", "o/r?x=1", "o/r#x", "o r/x", "o/" + "r" * 101,
                                        "a" * 40 + "/r", "https://github.com/o/r"])
def test_a_repository_that_is_not_owner_slash_name_is_refused_by_field(repository, tmp_path):
    source = {"repository": repository, "commit": "abcdef1", "path": "t.json.gz", "licence": "MIT"}
    with pytest.raises(ValidationError, match="expected owner/name of a public repository"):
        TraceSource.model_validate(source)
    case = {**RECORDED_CASE, "recorded": {**RECORDED_CASE["recorded"], "files": [
        {**RECORDED_CASE["recorded"]["files"][0], "source": source}]}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(case), encoding="utf-8")
    parsed, problems = parse_case_file(tmp_path / "c.yaml")
    assert parsed is None
    assert [(p.field, p.message.split(" (")[0]) for p in problems] == [
        ("recorded.files[0].source.repository", "expected owner/name of a public repository")]
    assert repr(repository) in problems[0].message


@pytest.mark.parametrize("repository", ["o/r", "facebookresearch/HolisticTraceAnalysis", "AMD-AGI/TraceLens",
                                        "a-b/c.d_e-f", "a" * 39 + "/" + "r" * 100])
def test_owner_slash_name_reads(repository):
    assert TraceSource.model_validate({"repository": repository, "commit": "abcdef1", "path": "p", "licence": "MIT"})
