"""Progress of record/verify/run: plain lines when the output is not a terminal, a live bar when it is."""

from __future__ import annotations

import io

from diageval.progress import Progress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    with Progress(out) as p:
        assert not p.live
        p.started("record", 1, 3, "straggler-rank1")
        p("straggler-rank1: twin 1/3")
        p.advance("record")
        p.step("evidence", 4, 16, "slow-checkpoint-every-5", "ready", 6.523)
        p.line("note: something")
    assert out.getvalue().splitlines() == [
        "[1/3] straggler-rank1",
        "straggler-rank1: twin 1/3",
        f"evidence [ 4/16] {'slow-checkpoint-every-5':<40} {'ready':<15}    6.52 s",
        "note: something",
    ]


def test_live_bar_on_a_terminal_counts_and_estimates():
    out = FakeTerminal()
    with Progress(out) as p:
        assert p.live
        for i in range(1, 4):
            p.started("verify", i, 4, f"verifying case-{i}")
            p.advance("verify")
        p.line("a note above the bar")
    text = out.getvalue()
    assert "3/4" in text and "verify" in text and "left" in text
    assert "a note above the bar" in text
    assert "[1/4]" not in text  # no plain lines on a terminal


def test_silent_without_a_stream():
    p = Progress(None)
    p.started("record", 1, 1, "x")
    p.step("diagnose", 1, 1, "x", "ok", None)
    p.line("x")
    p.close()
    assert not p.live


def test_a_tally_names_no_item():
    """Issue 44: a diagnosis line carries counts (done, and how many ended with each status), never the case."""
    out = io.StringIO()
    with Progress(out) as p:
        p.tally("diagnose", 3, 16, {"ok": 2, "abstained": 1}, 6.523)
        p.tally("diagnose", 4, 16, {"ok": 2, "abstained": 1, "timeout": 1}, None)
    assert out.getvalue().splitlines() == ["diagnose [ 3/16] abstained 1, ok 2     6.52 s",
                                           "diagnose [ 4/16] abstained 1, ok 2, timeout 1"]
    bar = FakeTerminal()
    with Progress(bar) as p:
        p.tally("diagnose", 1, 2, {"ok": 1}, 1.0)
    assert "ok 1" in bar.getvalue() and "1/2" in bar.getvalue()


def test_no_line_carries_a_control_sequence():
    """Issue 44: a status or an error may carry a diagnoser's words; neither a line nor the bar passes ESC,
    C1 or bidi controls to the terminal."""
    hostile = "x\x1b]52;c;cHduZWQ=\x07\x9b2J\u202eevil"
    for out in (io.StringIO(), FakeTerminal()):
        with Progress(out) as p:
            p.line(hostile)
            p.step("evidence", 1, 1, "case", hostile, 1.0)
            p(hostile)
        text = out.getvalue()
        assert "]52;c;cHduZWQ=" in text and "\\u001b" in text
        assert not any(c in text for c in ("\x07", "\x9b", "\u202e")), repr(text)
        assert "\x1b]52" not in text
