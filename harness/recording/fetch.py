"""``diageval data fetch``: recorded cases' trace files, downloaded from their public source and checked.

A recorded case names each file by its ``path`` under the data folder, its ``sha256`` and its ``source``
(repository, commit, path, licence). :func:`plan_fetch` turns the cases into one download per data-folder
path (two cases on the same file share it); :func:`fetch_files` downloads each with ``pooch`` into the
data folder (``paths.data_dir``: ``--data``, else ``$DIAGEVAL_DATA``, else the user cache folder).

* **Checked**: pooch streams into a temporary file beside the target and moves it into place only when its
  sha256 is the one the case names; a mismatch is refused, naming the file, the URL, both checksums and the
  case file, and nothing is written at the target path.
* **Resumed**: a file already present with the named sha256, in the data folder or in a folder searched
  after it (``paths.data_dirs``: ``../shared/real-traces`` of a checkout), is not downloaded again. Files
  are the unit: an interrupted download leaves no partial file at the target path.
* **Retried**: a failed download or a checksum mismatch is tried again ``retries`` times (pooch waits 1 s,
  2 s, ... up to 10 s between tries); a file that still fails is reported and the others go on.
* **Where from**: ``https://github.com/{repository}/raw/{commit}/{path}`` (GitHub resolves the short
  commits some cases name). ``--mirror URL`` or ``$DIAGEVAL_DATA_MIRROR`` replaces it with
  ``URL/{repository}/{commit}/{path}``: any static HTTP server over a folder laid out that way (the tests
  serve one on 127.0.0.1).

* **Capped**: a download stops, and is refused, past ``PlannedFile.max_bytes`` bytes, whatever the server says or
  keeps sending (an endless mirror once wrote 3.0 GB in 40 s). The cap is the file's ``size``, pinned beside its
  sha256 in the case file (every built-in recorded file has one; a test checks them against the shared copies).
  A contributed case without one gets the cap derived from what it does state, that the file is a trace the
  harness imports (``recorded.py`` imports it through ``import_traces``): the importer refuses a trace whose JSON
  is over ``MAX_TRACE_BYTES`` (4 GiB), and a gzipped trace is smaller than its JSON, so a larger file could never
  be a case's evidence.
* **Cleaned up**: the download goes to a temporary file beside the target (pooch's), removed on any error, on a
  refusal, and on Ctrl-C; the CLI turns SIGTERM into the same interrupt while it fetches.

Decided here: a request that receives no byte for ``DOWNLOAD_TIMEOUT_S`` seconds fails (requests' timeout
counts per socket operation, not the whole file). pooch's own log lines are shown as progress notes.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shlex
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import quote

from pydantic import BaseModel

from diageval.bundle.importer import MAX_TRACE_BYTES
from diageval.cases.load import LoadedCase
from diageval.errors import DiagevalError

if TYPE_CHECKING:
    from diageval.cases.model import RecordedFile
    from diageval.progress import Progress

SOURCE_URL = "https://github.com/{repository}/raw/{commit}/{path}"
MIRROR_ENV = "DIAGEVAL_DATA_MIRROR"
DEFAULT_RETRIES = 3
DOWNLOAD_TIMEOUT_S = 60.0
_BLOCK = 1 << 20


class FetchError(DiagevalError):
    """The request cannot be planned: an unknown or non-recorded case, or two cases naming one path with
    different checksums."""


class PlannedFile(BaseModel):
    """One file to have in the data folder: where it goes, what it must hash to, where it comes from."""

    path: str  # relative to the data folder
    sha256: str
    url: str
    cases: list[str]  # ids of the cases naming it
    case_files: list[str]  # their case files, named when the file is refused
    max_bytes: int = MAX_TRACE_BYTES  # the download is refused past this (see the module's "Capped")


class FetchResult(BaseModel):
    path: str
    url: str
    status: Literal["present", "downloaded", "failed"]
    location: str | None = None  # the file's full path when present or downloaded
    size: int | None = None  # bytes, when present or downloaded
    error: str | None = None


def source_url(file: "RecordedFile", mirror: str | None = None) -> str:
    """The URL of a recorded file: its repository's raw file at the named commit, or under ``mirror``."""
    src = file.source
    if mirror:
        return f"{mirror.rstrip('/')}/{src.repository}/{src.commit}/{quote(src.path)}"
    return SOURCE_URL.format(repository=src.repository, commit=src.commit, path=quote(src.path))


def default_mirror() -> str | None:
    return os.environ.get(MIRROR_ENV) or None


def plan_fetch(cases: Sequence[LoadedCase], case_ids: Sequence[str] = (), *, mirror: str | None = None) -> list[PlannedFile]:
    """Every file of the named recorded cases (all recorded cases when none is named), one per path."""
    by_id = {lc.case.id: lc for lc in cases}
    unknown = [i for i in case_ids if i not in by_id]
    if unknown:
        raise FetchError(f"no such case: {', '.join(unknown)} (`diageval cases list` shows the corpus)")
    live = [i for i in case_ids if not by_id[i].case.recorded_files()]
    if live:
        raise FetchError(f"not a recorded case (its evidence is recorded live, nothing to fetch): {', '.join(live)}")
    chosen = [by_id[i] for i in dict.fromkeys(case_ids)] if case_ids else [lc for lc in cases if lc.case.recorded_files()]
    planned: dict[str, PlannedFile] = {}
    for lc in chosen:  # a recorded job's files, and each run's of a recorded regression or fleet
        for f in lc.case.recorded_files():
            have = planned.get(f.path)
            if have is None:
                planned[f.path] = PlannedFile(path=f.path, sha256=f.sha256, url=source_url(f, mirror),
                                              cases=[lc.case.id], case_files=[str(lc.path)],
                                              max_bytes=f.size or MAX_TRACE_BYTES)
            elif have.sha256 != f.sha256:
                raise FetchError(f"{f.path}: {lc.path} names sha256 {f.sha256}, {have.case_files[0]} names "
                                 f"{have.sha256}; one path cannot hold both files")
            else:
                have.cases.append(lc.case.id)
                have.case_files.append(str(lc.path))
    return list(planned.values())


def fetch_command(*, data: Path | None = None, cases: Path | None = None) -> str:
    """The command line that fetches what a run or a listing found absent, with the folders it used."""
    parts = ["diageval", "data", "fetch"]
    if cases is not None:
        parts += ["--cases", shlex.quote(str(cases))]
    if data is not None:
        parts += ["--data", shlex.quote(str(data))]
    return " ".join(parts)


def _sha256(path: Path) -> str:
    from diageval.fileio import sha256_file

    return sha256_file(path)


def _present(file: PlannedFile, folders: Sequence[Path]) -> Path | None:
    """The first copy of the file, in the folders' order, with the named checksum."""
    for folder in folders:
        path = folder / file.path
        if path.is_file() and _sha256(path) == file.sha256:
            return path
    return None


class DownloadTooLarge(DiagevalError, OSError):
    """A server sent (or announced) more than the file's cap. An OSError, so pooch does not try it again: a
    server that sends too much once is not one to ask twice."""


class _CappedDownloader:
    """Streams a URL into pooch's temporary file, at most ``max_bytes`` bytes (set per file), hashing as it
    writes, so that a refusal can name the sha256 of what came."""

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.max_bytes = MAX_TRACE_BYTES
        self.last_sha256: str | None = None

    def __call__(self, url: str, output_file: str, pooch_obj: object, check_only: bool = False):
        import pooch
        import requests

        self.last_sha256 = None
        if check_only:  # pooch's is_available: a HEAD request, nothing written
            return pooch.HTTPDownloader(timeout=self.timeout)(url, output_file, pooch_obj, check_only=True)
        cap = self.max_bytes
        with requests.get(url, stream=True, timeout=self.timeout) as response:
            response.raise_for_status()
            announced = response.headers.get("content-length", "")
            if announced.isdigit() and int(announced) > cap:
                raise DownloadTooLarge(f"announced {int(announced)} bytes, over the cap of {cap}")
            h = hashlib.sha256()
            got = 0
            with open(output_file, "wb") as out:
                for block in response.iter_content(chunk_size=_BLOCK):  # a gzip-encoded body counts inflated
                    got += len(block)
                    if got > cap:
                        raise DownloadTooLarge(f"sent more than the cap of {cap} bytes")
                    out.write(block)
                    h.update(block)
        self.last_sha256 = h.hexdigest()
        return None


class _ToProgress(logging.Handler):
    def __init__(self, progress: "Progress | None"):
        super().__init__(logging.INFO)
        self.progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        if self.progress is not None and record.getMessage().startswith("Failed"):  # a retry; "Downloading" is ours
            self.progress.line(f"   retry: {record.getMessage()}")


@contextlib.contextmanager
def _pooch_log_to(progress: "Progress | None") -> Iterator[None]:
    """pooch logs to stderr through its own logger; for the fetch, its retry notes go to the progress."""
    import pooch

    logger = pooch.get_logger()
    saved = list(logger.handlers)
    for h in saved:
        logger.removeHandler(h)
    handler = _ToProgress(progress)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        for h in saved:
            logger.addHandler(h)


def _failure(file: PlannedFile, exc: BaseException, downloader: _CappedDownloader, target: Path) -> str:
    import requests

    if isinstance(exc, DownloadTooLarge):
        return (f"{file.path}: refused: {file.url} {exc} (no trace the import reads is larger); nothing was written "
                f"to {target}")
    if isinstance(exc, ValueError) and downloader.last_sha256 and downloader.last_sha256 != file.sha256:
        kept = ""
        if target.is_file():
            kept = f"; the file already at {target} (sha256 {_sha256(target)}) is left as it was"
        return (f"{file.path}: refused: {file.url} served a file with sha256 {downloader.last_sha256}, not "
                f"{file.sha256} named by {', '.join(file.case_files)}; nothing was written to {target}{kept}")
    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        return f"{file.path}: {file.url} answered HTTP {exc.response.status_code} {exc.response.reason}"
    return f"{file.path}: {file.url}: {type(exc).__name__}: {exc}"


def fetch_files(files: Sequence[PlannedFile], dest: Path, *, search: Sequence[Path] = (),
                retries: int = DEFAULT_RETRIES, timeout: float = DOWNLOAD_TIMEOUT_S,
                progress: "Progress | None" = None) -> list[FetchResult]:
    """Download each file absent from ``dest`` and ``search`` into ``dest``, checked; one result per file."""
    import pooch
    import requests

    dest = Path(dest)
    folders = [dest] + [Path(d) for d in search if Path(d) != dest]
    pup = pooch.Pooch(path=dest, base_url="", registry={f.path: f"sha256:{f.sha256}" for f in files},
                      urls={f.path: f.url for f in files}, retry_if_failed=retries)
    downloader = _CappedDownloader(timeout)
    results = []
    with _pooch_log_to(progress):
        for i, file in enumerate(files, 1):
            start = time.perf_counter()
            if progress is not None and progress.live:
                progress.started("fetch", i, len(files), file.path)
            found = _present(file, folders)
            if found is not None:
                result = FetchResult(path=file.path, url=file.url, status="present", location=str(found),
                                     size=found.stat().st_size)
                where = next(d for d in folders if found == d / file.path)
                status = "present" if where == dest else f"present in {where}"
            else:
                try:
                    downloader.max_bytes = file.max_bytes
                    got = Path(pup.fetch(file.path, downloader=downloader))
                    result = FetchResult(path=file.path, url=file.url, status="downloaded", location=str(got),
                                         size=got.stat().st_size)
                    status = f"downloaded {result.size / 1e6:.2f} MB"
                except (ValueError, OSError, requests.RequestException) as exc:
                    result = FetchResult(path=file.path, url=file.url, status="failed",
                                         error=_failure(file, exc, downloader, dest / file.path))
                    status = "FAILED"
            results.append(result)
            if progress is not None:
                progress.step("fetch", i, len(files), file.path, status, time.perf_counter() - start)
    return results
