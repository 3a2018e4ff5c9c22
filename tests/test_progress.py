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
