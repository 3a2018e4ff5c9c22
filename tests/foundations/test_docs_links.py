"""The manual's links: every relative link in README.md and docs/*.md names a file that exists, and the README stays
a manual (at most ~250 lines; the details live in docs/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from locations import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_names_a_file(page):
    broken = [target for target in LINK.findall(page.read_text(encoding="utf-8"))
              if "://" not in target and not (page.parent / target).exists()]
    assert not broken, f"{page.relative_to(REPO)} links to missing files: {broken}"


def test_every_docs_page_is_reachable_from_the_readme():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    unlinked = [p.name for p in PAGES[1:] if f"docs/{p.name}" not in readme]
    assert not unlinked, f"docs pages the README's index does not name: {unlinked}"


def test_the_readme_is_a_manual_not_a_log():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail into docs/"
    # a calibration log names CI runs ("ci14") and dated figures; those belong to docs/calibration.md, written by code
    runs = [line for line in lines if re.search(r"\bci\d+\b", line)]
    assert not runs, f"README.md names CI runs: {runs[:3]}"
