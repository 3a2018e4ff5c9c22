"""Label support over a bundle cache: which labeled causes the recorded evidence holds, with the numbers.

    python benchmarks/label_support.py HOME [CASE...]

HOME is a ``$DIAGEVAL_HOME`` whose cache holds verified cases (a CI run's ``.diageval``). For every
positive case of the built-in corpus (or the named ones) whose repeat pairs the cache holds under this
checkout's recording code, it runs :func:`diageval.recording.label_support.label_support` on those
recordings and :func:`~diageval.recording.label_support.shown_support` on the one a diagnoser is shown (repeat 0),
exactly as ``verify`` does (on the drawn case, recording/draw.py), and prints one line per labeled cause and check
(supported, refused or not checked, with the measure's numbers), the seconds each case's checks took, and the
totals: the checks' cost in a verify of the corpus. Records nothing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    from diageval.cases.load import load_case_set
    from diageval.recording.cache import cache_key, read_truth
    from diageval.recording.draw import recorded_as
    from diageval.recording.label_support import label_support, needs_check, read_recordings, shown_support
    from diageval.recording.verify import twin_repeat, verification_subject

    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    cache = Path(argv[0]) / "bundles"
    if not (cache / "evidence").is_dir():
        print(f"{cache}: no bundle cache here (expected {cache / 'evidence'})", file=sys.stderr)
        return 2
    wanted = set(argv[1:])
    counts = {check: {"supported": 0, "refused": 0, "not checked": 0} for check in ("pairs", "shown")}
    total, cases = 0.0, 0
    for lc in load_case_set().cases:
        case = recorded_as(lc.case, cache)[0]  # the drawn variant verify records
        if wanted and case.id not in wanted:
            continue
        if case.labels.expect != "diagnose" or case.recorded is not None or case.kind != "job":
            continue
        if all(needs_check(case, c, shown=True) is not None for c in case.labels.causes):
            continue
        truth = read_truth(cache, cache_key(case, "cpu"))
        if truth is None or truth.verification is None:
            continue
        pairs = truth.verification.repeats
        folder = lambda c, i: cache / "evidence" / cache_key(c, "cpu", i)  # noqa: E731
        subject = verification_subject(case)
        injected = [folder(subject, i) for i in range(pairs)]
        healthy = [folder(subject.healthy_twin(), twin_repeat(subject, i)) for i in range(pairs)]
        if not all(f.is_dir() for f in injected + healthy):
            print(f"{case.id}: recordings missing from the cache, skipped")
            continue
        started = time.perf_counter()
        case_steps, twin_steps = read_recordings(injected), read_recordings(healthy)
        checks = {"pairs": label_support(subject, case_steps, twin_steps),
                  "shown": shown_support(subject, case_steps[0], twin_steps)}
        took = time.perf_counter() - started
        total, cases = total + took, cases + 1
        for check, support in checks.items():
            for s in support:
                verdict = "not checked" if not s.checked else "supported" if s.supported else "refused"
                counts[check][verdict] += 1
                print(f"{case.id:40s} {check:5s} {verdict:11s} {s.category:32s} {s.detail}")
        print(f"{'':40s} ({pairs} pairs, {took:.1f} s)")
    print(f"\n{cases} cases checked in {total:.1f} s; causes, " + "; ".join(
        f"{check}: " + ", ".join(f"{v} {k}" for k, v in c.items()) for check, c in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
