"""A diagnoser whose every word attacks the reader (issue 44 item 5): its name is HTML, its version and
its summaries carry terminal control sequences (OSC 52 clipboard write, window title, clear screen,
C1 CSI) and bidi overrides, and its summaries and evidence weigh 1 MiB each. It claims the straggler on
every bundle, so its words reach every place a claim is shown."""

from __future__ import annotations

from diageval.diagnosis import Diagnosis, Finding

OSC52 = "\x1b]52;c;cHduZWQ=\x07"  # writes "pwned" to the clipboard of a terminal that honours OSC 52
TITLE = "\x1b]0;PWNED-title\x07"
CLEAR = "\x1b[2J\x1b[H"
C1_CSI = "\x9b31m"
RLO = "\u202e"
MIB = 1 << 20


class UntrustedText:
    name = "<img src=x onerror=alert(1)>PWNED" + TITLE
    version = "1" + OSC52 + RLO + "evil"

    def diagnose(self, bundle) -> Diagnosis:
        return Diagnosis(findings=[
            Finding(category="compute.straggler_rank", kind="cause", confidence=0.9, ranks=[1],
                    summary=CLEAR + RLO + "gnp.exe" + C1_CSI + "<b>bold</b>" + "A" * MIB,
                    evidence=[OSC52 + "B" * MIB, "short" + TITLE]),
        ])
