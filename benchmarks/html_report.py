"""Size of the HTML report and its render time in headless Chromium (printed, never asserted).

    python benchmarks/html_report.py runs/ci/*/                     # build the page from run folders, then load it
    python benchmarks/html_report.py runs/ci/leaderboard.html --screenshot runs/ci/leaderboard.png

Prints: the page's size (and how much of it is inline SVG), the time to build it from the run folders
(when given folders), and over ``--repeats`` fresh loads in one headless Chromium the page's own
navigation time (start of navigation to the end of the load event, which includes parsing, styling,
layout and the inline script) and the wall time of the load as seen from Python; medians and ranges.
Targets from issue 13, for 7 diagnosers x the built-in corpus: under 5 MB and under 2 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path


MAX_SHOT_PX = 16_000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", type=Path, help="run folders, or one .html file")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--screenshot", type=Path, default=None, help="also save a full-page PNG here")
    args = parser.parse_args()

    from diageval.reports.browser import load_milliseconds, open_page, unavailable_reason

    if len(args.inputs) == 1 and args.inputs[0].suffix == ".html":
        page_file = args.inputs[0]
        print(f"page: {page_file}")
    else:
        from diageval.reports.html import write_html_report
        from diageval.reports.html_data import gather

        page_file = Path(tempfile.mkdtemp()) / "report.html"
        start = time.perf_counter()
        inputs = gather(args.inputs)
        write_html_report(inputs, page_file)
        print(f"built from {len(inputs.runs)} runs in {time.perf_counter() - start:.2f} s")
    html = page_file.read_text(encoding="utf-8")
    svg = sum(len(part.split("</svg>")[0]) for part in html.split("<svg")[1:])
    sections, rows = html.count('<section class="case"'), html.count('<tr class="claim')
    print(f"size: {len(html.encode()) / 1e6:.3f} MB ({len(html.encode())} bytes; inline SVG {svg / 1e6:.3f} MB); "
          f"{sections} case sections, {rows} claim rows")

    reason = unavailable_reason()
    if reason:
        print(f"render: not measured: {reason}")
        return 0
    navigation, wall = [], []
    for i in range(args.repeats):
        start = time.perf_counter()
        with open_page(page_file) as (page, log):
            wall.append(time.perf_counter() - start)
            navigation.append(load_milliseconds(page) / 1000)
            if i == 0 and args.screenshot is not None:
                args.screenshot.parent.mkdir(parents=True, exist_ok=True)
                # Chromium cannot capture a page taller than its largest texture (16,384 px): the CI page, with a
                # section per case, is far taller. The shot is the page's top, its boards and plots, at most that high.
                height = min(page.evaluate("document.documentElement.scrollHeight"), MAX_SHOT_PX)
                width = page.evaluate("document.documentElement.clientWidth")  # the window's width: wide tables scroll
                page.screenshot(path=str(args.screenshot), full_page=True,
                                clip={"x": 0, "y": 0, "width": width, "height": height})
                print(f"screenshot: {args.screenshot} ({width}x{height} px, the page's top at the window's width)")
            if log.console_errors or log.page_errors or log.requests:
                print(f"warning: console errors {log.console_errors + log.page_errors}, requests {log.requests}")

    def line(values: list[float]) -> str:
        return f"median {statistics.median(values):.3f} s (min {min(values):.3f}, max {max(values):.3f}, n={len(values)})"

    print(f"render in headless Chromium (navigation start to load end): {line(navigation)}")
    print(f"browser start + load, wall clock from Python: {line(wall)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
