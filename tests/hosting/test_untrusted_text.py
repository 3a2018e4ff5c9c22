"""Issue 44 item 5: a diagnoser's words are inert wherever a person reads them.

A diagnoser's name, version, summaries and evidence go through ``diageval run``, ``report`` (markdown and
HTML), ``diagnose`` and ``compare``; none of them may pass a control sequence (ESC, BEL, C1) or a bidi
override to the terminal or the page, the markdown must not carry the name as HTML, and the HTML page
must not embed 1 MiB summaries whole. The diagnoser: tests/untrusted_text_diagnoser.py."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from run_fakes import FakeEvidence, copy_real_cases, write_bundle

from diageval.cli import main
from diageval.hosting.sandbox import probe
from diageval.inert import clipped, inert, markdown_inert

SPEC = "untrusted_text_diagnoser:UntrustedText"
ACTIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
REAL_CASES = ["healthy/mlp-ddp-healthy.yaml", "healthy/convnet-healthy.yaml", "compute/straggler-rank1.yaml",
              "compute/straggler-rank0.yaml", "input/starved-loader-mlp.yaml", "comm/collective-stall-mlp.yaml"]
# six: compare needs five cases scored in both runs, and in ci13 one of five was not (which status is not known: the
# run folder was gone), so the compare check failed on something this test does not test; the statuses are now shown


def active(text: str) -> list[str]:
    return sorted({repr(c) for c in ACTIVE.findall(text)})


def test_inert_writes_every_control_and_bidi_character_as_its_code_point():
    hostile = "a\x1b]52;c;cHduZWQ=\x07b\u202ec\x9b2J\u2066d\re\x00f"
    shown = inert(hostile)
    assert active(shown) == [] and shown == "a\\u001b]52;c;cHduZWQ=\\u0007b\\u202ec\\u009b2J\\u2066d\\u000de\\u0000f"
    assert inert("lone \ud800").encode("utf-8") == b"lone \\ud800"  # encodable: no UnicodeEncodeError on a terminal
    assert inert("two\n\tlines") == "two\n\tlines" and inert("two\nlines", newlines=False) == "two\\u000alines"
    assert json.loads(inert(json.dumps({"s": "x\x9by\u202e"}, ensure_ascii=False))) == {"s": "x\x9by\u202e"}  # still JSON
    assert markdown_inert("<img src=x onerror=alert(1)>|**b**") == r"\<img src=x onerror=alert\(1\)\>\|\*\*b\*\*"
    assert clipped("abcdef", 4, "f.json") == "abcd… (2 more characters in f.json)" and clipped("ab", 4, "f") == "ab"


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """One `diageval run` of the hostile diagnoser on six real cases (fake evidence): its CLI result and folder."""
    if probe() is not None:
        pytest.skip(f"no sandbox can start here: {probe()}")
    tmp = tmp_path_factory.mktemp("hostile")
    root = copy_real_cases(tmp / "cases", REAL_CASES)
    fake = FakeEvidence(tmp / "bundles")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("diageval.run.pipeline.prepare_evidence", fake)  # the name the pipeline holds (from the face)
        out = CliRunner().invoke(main, ["run", "-d", SPEC, "--cases", str(root), "--out", str(tmp / "runs"), "--timeout", "60"])
    assert out.exit_code == 0, out.output[-3000:]
    # the fake prepared every case: patched under another name, the run read the home's recordings, and a case
    # the home judged invalid left the board too few cases to compare (ci13)
    assert sorted(fake.calls) == sorted(Path(c).stem for c in REAL_CASES), fake.calls
    [run_dir] = list((tmp / "runs").iterdir())
    return out, run_dir


def test_run_prints_the_words_inert(hostile_run):
    out, run_dir = hostile_run
    saved = json.loads(next(run_dir.glob("cases/*/diagnosis.json")).read_text())
    assert len(saved["findings"][0]["summary"]) > 1 << 20  # the full text stays in the run folder
    assert active(out.stdout) == [] and active(out.stderr) == [], (active(out.stdout), active(out.stderr))
    assert "PWNED" in out.stdout and "\\u001b]52" in out.stdout  # shown, visibly


def test_the_markdown_board_escapes_name_and_version(hostile_run, tmp_path):
    md_file = tmp_path / "board.md"
    out = CliRunner().invoke(main, ["report", str(hostile_run[1]), "-o", str(md_file)])
    assert out.exit_code == 0, out.output[-3000:]
    markdown = md_file.read_text()
    assert active(out.stdout) == [] and active(markdown) == []
    assert not re.search(r"(?<!\\)<img", markdown) and r"\<img src=x onerror=alert\(1\)\>PWNED" in markdown
    out = CliRunner().invoke(main, ["compare", str(hostile_run[1]), str(hostile_run[1]), "--n-boot", "0"])
    statuses = [(r["case_id"], r["status"]) for r in map(json.loads, (hostile_run[1] / "results.jsonl").open())]
    assert out.exit_code == 0, (out.output[-2000:], statuses)
    assert active(out.stdout) == [] and r"\<img" in out.stdout and not re.search(r"(?<!\\)<img", out.stdout)


def test_the_html_page_caps_each_claim_and_escapes_bidi(hostile_run, tmp_path):
    html_file = tmp_path / "page.html"
    out = CliRunner().invoke(main, ["report", str(hostile_run[1]), "--html", str(html_file)])
    assert out.exit_code == 0, out.output[-3000:]
    page = html_file.read_text()
    assert active(page) == [] and "<img src=x" not in page and "<b>bold</b>" not in page
    assert len(page) < 1 << 20, len(page)  # a claim a case of two 1 MiB texts each, capped
    print(f"page: {len(page.encode())} bytes for {len(REAL_CASES)} claims of 2 MiB of text each")
    assert "more characters in" in page and "diagnosis.json" in page  # says where the whole text is


def test_diagnose_prints_the_words_inert(tmp_path):
    if probe() is not None:
        pytest.skip(f"no sandbox can start here: {probe()}")
    bundle = write_bundle(tmp_path / "one", "0f3a")
    for args in (["diagnose", "-d", SPEC, str(bundle)], ["diagnose", "-d", SPEC, "--json", str(bundle)]):
        out = CliRunner().invoke(main, args)
        assert out.exit_code == 0, out.output[-3000:]
        assert active(out.stdout) == [] and "\\u009b31m" in out.stdout
    assert json.loads(out.stdout)["findings"][0]["summary"].startswith("\x1b[2J")  # --json still decodes to the words


def test_an_error_quoting_the_diagnoser_is_inert(tmp_path):
    """`diagnose` ends with the diagnoser's error, which quotes the tail of its stderr: inert too."""
    if probe() is not None:
        pytest.skip(f"no sandbox can start here: {probe()}")
    script = tmp_path / "fails.py"
    script.write_text("import sys\nsys.stderr.write('boom \\x1b]52;c;cHduZWQ=\\x07 \\u202e done\\n')\nsys.exit(2)\n")
    bundle = write_bundle(tmp_path / "one", "0f3a")
    out = CliRunner().invoke(main, ["diagnose", "-d", f"cmd:{sys.executable} {script} {{bundle}} {{out}}", str(bundle)])
    assert out.exit_code == 1 and "boom" in out.output, out.output
    assert active(out.output) == [] and "\\u001b]52" in out.output
