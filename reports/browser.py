"""Open an HTML report in headless Chromium (Debian's ``chromium``, driven by Playwright's Python API) with
every network request refused and recorded: for the browser test and the report benchmark.

Playwright's own browser download is not used (it fetches a browser build, which this project's machines
cannot); the binary is ``$DIAGEVAL_CHROMIUM``, else ``chromium`` on the PATH, else ``/usr/bin/chromium``.
The flags are the ones that start Chromium as root on a machine without a network or a GPU: no sandbox,
no GPU, and no background networking (component updates, sync, first-run fetches), which would
otherwise try and fail to reach the network at every start.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def find_chromium() -> str | None:
    """The Chromium binary to drive, or None when there is none."""
    for candidate in (os.environ.get("DIAGEVAL_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium"):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def unavailable_reason() -> str | None:
    """Why a page cannot be opened here (no Chromium, no Playwright), or None when it can."""
    if find_chromium() is None:
        return "no Chromium binary (install Debian's chromium, as .ci/run does, or set $DIAGEVAL_CHROMIUM)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright's Python package is not installed (pip install -e '.[test]')"
    return None


@dataclass
class PageLog:
    """What happened while the page was open."""

    console: list[tuple[str, str]] = field(default_factory=list)  # (type, text) of every console message
    page_errors: list[str] = field(default_factory=list)  # uncaught exceptions
    requests: list[str] = field(default_factory=list)  # every URL requested besides the page itself (all refused)

    @property
    def console_errors(self) -> list[str]:
        return [text for kind, text in self.console if kind == "error"]


@contextmanager
def open_page(html: Path, *, width: int = 1400, height: int = 900) -> Iterator[tuple[Any, PageLog]]:
    """Load ``html`` (a file) in headless Chromium; yield (Playwright page, log). Any request other than
    the file itself is refused and recorded in ``log.requests``."""
    from playwright.sync_api import sync_playwright

    binary = find_chromium()
    if binary is None:
        raise RuntimeError(unavailable_reason())
    url = Path(html).resolve().as_uri()
    log = PageLog()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=binary, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.on("console", lambda m: log.console.append((m.type, m.text)))
            page.on("pageerror", lambda e: log.page_errors.append(str(e)))

            def route(r: Any) -> None:
                if r.request.url == url:
                    r.continue_()
                else:
                    log.requests.append(r.request.url)
                    r.abort()

            page.route("**/*", route)
            page.goto(url, wait_until="load")
            yield page, log
        finally:
            browser.close()


def load_milliseconds(page: Any) -> float:
    """The page's own navigation timing: from the start of navigation to the end of its load event."""
    return float(page.evaluate(
        "() => { const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd - n.startTime; }"))
