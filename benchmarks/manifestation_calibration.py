"""Calibration of the manifestation test (issue 22 item 1): its A/A false-manifest rate and the positive
rungs' manifest rate, each with n and a Clopper-Pearson 95% interval, measured on this machine as it is.

A/A: for the most common healthy twins of the CPU positive cases (``--workloads`` of them), a pool of
``--pool`` recordings of the twin is made back to back, as verify makes its pairs (twin, case, twin, ...),
and cut into consecutive pairs (recording 2j is the "twin", 2j+1 the "case"). One A/A comparison is the
sequential test of a case that uses that twin on one block of ``LOOKS[-1]`` consecutive pairs, the blocks
disjoint: the twin against itself, with the case's metric, step range and min_ratio (and again with
min_ratio 1.1, the lowest a rung near the detection limit would claim), exactly as verify would test it.
Comparisons share no recording, so the Clopper-Pearson interval printed is the interval of independent
trials (up to the machine's own slow drift, which the consecutive pairs of a real verify see too). Each
comparison costs ``2 * LOOKS[-1]`` = 24 recordings (an A/A comparison rarely stops before the cap), 1.5-3.5 s
each for an MLP twin on 2 cores (3.5 s for the checkpointing twins at load 2.5), so the default 200 of them
(``--pool 960`` on 5 workloads) take 2-4.5 hours of a quiet machine. A second figure stretches a smaller
pool: ``--draws`` comparisons per workload on ``LOOKS[-1]`` pairs drawn at random from the pool (pairs in drawn order);
draws share pairs, so that interval treats dependent comparisons as independent and is narrower than the
truth. The pool's lag-1 autocorrelation of consecutive pair shifts is printed beside it: near 0, a pair is
close to an independent draw from the machine's shift distribution, which is what the draws assume.

Positive: ``--rounds`` full verifies of the CPU positive cases (or ``--cases``), each round in a cache
folder of its own under ``HOME`` (so every round records afresh; each case with twin recordings of its own,
interleaved with its case recordings, as in a real verify). Each round's wall time is one whole-corpus
verify (issue 22 item 6). The positive rate is over (case, round) and counts the manifestation test's
decision; a label check that fails (:mod:`diageval.recording.label_support`) is printed beside it, not
counted here.

Usage: python benchmarks/manifestation_calibration.py HOME [--pool 960] [--workloads 5] [--draws 100] [--rounds 3]
       [--cases ID ...] [--skip-aa] [--skip-positive] [--seed 0]
HOME is reused: recordings already there are not made again (delete it for a fresh measurement); the A/A
pool is found through HOME's index even when the recording code changed since.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import time
from collections import Counter
from pathlib import Path

from scipy.stats import beta

from diageval.bundle.model import EvidenceBundle
from diageval.cases.load import load_case_set
from diageval.recording.cache import ensure_bundle
from diageval.recording import manifest_test
from diageval.recording.manifest_test import LOOKS
from diageval.recording.verify import compare, verify_cases


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


def rate_line(what: str, k: int, n: int) -> str:
    lo, hi = clopper_pearson(k, n)
    return f"{what}: {k}/{n} = {k / n:.3f}  (95% Clopper-Pearson {lo:.3f}-{hi:.3f})"


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def positive_cpu_cases(case_set, only: list[str]):
    out = []
    for lc in case_set.cases:
        c = lc.case
        if c.labels.expect == "diagnose" and c.recorded is None and c.requires.device != "cuda" and c.manifest \
                and getattr(c, "fleet", None) is None and (not only or c.id in only):
            out.append(c)
    return out


def pool_index(cache: Path, case_id: str) -> dict[int, Path]:
    """Repeat -> folder of the pool recordings HOME already holds for the twin of ``case_id``, found through the
    cache's index whatever recording code made them (others' edits to the recording sources change the cache
    key; the pool's healthy recordings stay what they were, and the test is what is measured)."""
    index = cache / "index.jsonl"
    found: dict[int, Path] = {}
    if index.is_file():
        for line in index.read_text().splitlines():
            row = json.loads(line)
            folder = cache / "evidence" / row["key"]
            if row["role"] == "twin" and row["case_id"] == case_id and (folder / "bundle.json").is_file():
                found[row["repeat"]] = folder
    return found


def aa(home: Path, cases, pool: int, workloads: int, draws: int, rng: random.Random) -> None:
    by_twin: dict[str, list] = {}
    for c in cases:
        by_twin.setdefault(c.healthy_twin().spec_hash(), []).append(c)
    chosen = sorted(by_twin.values(), key=len, reverse=True)[:workloads]
    cache = home / "aa"
    cap = LOOKS[-1]
    counts: Counter = Counter()
    for group in chosen:
        twin = group[0].healthy_twin()
        made = pool_index(cache, group[0].id)
        started = time.perf_counter()
        steps = []
        for i in range(pool):
            folder = made.get(i)
            if folder is None:
                _, folder, _ = ensure_bundle(twin, "cpu", repeat=i, cache_dir=cache, role="twin")
            steps.append(EvidenceBundle.open(folder).steps())
        pairs = [(steps[2 * j], steps[2 * j + 1]) for j in range(pool // 2)]
        here: Counter = Counter()
        for start in range(0, len(pairs) - cap + 1, cap):
            block = pairs[start:start + cap]
            healthy, injected = [a for a, _ in block], [b for _, b in block]
            case = rng.choice(group)
            for label, min_ratio in (("own", case.manifest.min_ratio), ("1.1", 1.1)):
                c = case.model_copy(update={"manifest": case.manifest.model_copy(update={"min_ratio": min_ratio})})
                v = compare(c, injected, healthy)
                here[(label, "manifested")] += v.manifested
                here[(label, "significant")] += bool(v.test and v.test.p_value < v.test.alpha)
            here["n"] += 1
        shifts = [compare(group[0], [b], [a], repeats=1).test.pair_shifts[0] for a, b in pairs]
        logs = [math.log(x) for x in shifts]
        mid = statistics.fmean(logs)
        den = sum((x - mid) ** 2 for x in logs)
        lag1 = sum((x - mid) * (y - mid) for x, y in zip(logs, logs[1:])) / den if den > 0 else 0.0
        for _ in range(draws):
            drawn = rng.sample(pairs, cap)
            case = rng.choice(group)
            v = compare(case, [b for _, b in drawn], [a for a, _ in drawn])
            here[("drawn", "manifested")] += v.manifested
            here[("drawn", "n")] += 1
        counts.update(here)
        print(f"A/A twin of {group[0].id} ({twin.workload.name}, {twin.workload.steps} steps, shared by {len(group)} "
              f"cases): {pool} recordings in {time.perf_counter() - started:.0f} s, {here['n']} comparisons of {cap} "
              f"pairs, manifested {here[('own', 'manifested')]} (min_ratio 1.1: {here[('1.1', 'manifested')]}); "
              f"{load()}", flush=True)
        print(f"  pair shifts of this pool: sd of log {statistics.stdev(logs):.3f}, lag-1 autocorrelation {lag1:+.2f}, "
              f"{draws} drawn comparisons manifested {here[('drawn', 'manifested')]}", flush=True)
    n = counts["n"]
    print(f"A/A comparisons: {n}, disjoint blocks of {cap} consecutive pairs over {len(chosen)} workloads")
    for label in ("own", "1.1"):
        what = "the case's own min_ratio" if label == "own" else "min_ratio 1.1"
        print(rate_line(f"  A/A false-manifest rate at {what}", counts[(label, "manifested")], n))
    print(rate_line("  A/A p-value below its alpha at some look (ignoring min_ratio)", counts[("own", "significant")], n))
    if counts[("drawn", "n")]:
        print(rate_line("  A/A false-manifest rate over drawn comparisons (dependent: the interval is too narrow)",
                        counts[("drawn", "manifested")], counts[("drawn", "n")]))


def _test_passed(v) -> bool:
    """The manifestation test's own decision (the labels' checks apart)."""
    return bool(v.test and v.test.manifested)


def positive(home: Path, cases, rounds: int) -> None:
    seen: dict[str, list] = {c.id: [] for c in cases}  # case -> its Verification per round
    for r in range(rounds):
        cache = home / f"round{r}"
        before = load()
        started = time.perf_counter()
        results = []
        for case in cases:  # one at a time, printed as it ends (a stopped run still says what it saw)
            t0 = time.perf_counter()
            for _, v in verify_cases([case.id], repeats=None, device="cpu", cache_dir=cache):
                results.append((case.id, v))
                seen[case.id].append(v)
                problems = getattr(v, "label_problems", None) or []
                print(f"  round {r} {case.id}: test manifested={_test_passed(v)} ratio={v.ratio:.2f} "
                      f"(min {v.min_ratio}) pairs={v.repeats} z={v.test.statistic:.1f} p={v.test.p_value:.1e} "
                      f"sd={v.test.shift_sd:.2f} difficulty z={v.effect_to_noise:.1f} {v.difficulty} "
                      f"{time.perf_counter() - t0:.0f} s"
                      + (f"; label check: {'; '.join(map(str, problems))}" if problems else ""), flush=True)
        wall = time.perf_counter() - started
        missed = [c for c, v in results if not _test_passed(v)]
        refused = [c for c, v in results if _test_passed(v) and not v.manifested]
        print(f"round {r}: {len(results)} cases verified in {wall:.0f} s ({before} before, {load()} after); "
              f"test missed: {', '.join(missed) or 'none'}; label check refused: {', '.join(refused) or 'none'}",
              flush=True)
    every = [v for vs in seen.values() for v in vs]
    print(rate_line("positive rungs' manifest rate over (case, round), the test's decision",
                    sum(map(_test_passed, every)), len(every)))
    print(rate_line("  and with every label check passed (what a run counts valid)",
                    sum(v.manifested for v in every), len(every)))
    print("pairs used per verify:", dict(sorted(Counter(v.repeats for v in every).items())))
    for c, vs in sorted(seen.items()):
        hits = sum(map(_test_passed, vs))
        if vs and hits < rounds:
            print(f"  {c}: the test manifested it in {hits}/{rounds} rounds")
    print("Per cause, the rungs hard (difficulty z < 3) in a round, how many rounds they manifested (label checks "
          "included), and the test's power at their median measured ratio and sd (manifest_test.power):")
    by_cause: dict[str, list] = {}
    for case in cases:
        for label in case.labels.causes:
            by_cause.setdefault(label.category, []).append(case)
    for cause, members in sorted(by_cause.items()):
        rows = []
        for case in members:
            vs = seen[case.id]
            if not vs or not any(v.difficulty == "hard" for v in vs):
                continue
            ratio = statistics.median(v.ratio for v in vs)
            sd = statistics.median(v.test.shift_sd for v in vs if v.test)
            power = manifest_test.power(ratio, sd, case.manifest.min_ratio)
            rows.append(f"{case.id} (hard in {sum(v.difficulty == 'hard' for v in vs)}/{len(vs)}, manifested "
                        f"{sum(v.manifested for v in vs)}/{len(vs)}, ratio {ratio:.2f}, power {power:.3f})")
        print(f"  {cause}: {len(members)} rungs; hard: {'; '.join(rows) or 'none'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("home", type=Path)
    ap.add_argument("--pool", type=int, default=960)
    ap.add_argument("--workloads", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--draws", type=int, default=100, help="A/A comparisons per workload drawn at random from its pool")
    ap.add_argument("--cases", nargs="*", default=[])
    ap.add_argument("--skip-aa", action="store_true")
    ap.add_argument("--skip-positive", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.pool < 2 * LOOKS[-1]:
        ap.error(f"--pool must give at least {LOOKS[-1]} pairs ({2 * LOOKS[-1]} recordings)")
    cases = positive_cpu_cases(load_case_set(), args.cases)
    print(f"{len(cases)} CPU positive cases; looks at {LOOKS} pairs; {load()}", flush=True)
    if not args.skip_aa:
        aa(args.home, cases, args.pool, args.workloads, args.draws, random.Random(args.seed))
    if not args.skip_positive:
        positive(args.home, cases, args.rounds)


if __name__ == "__main__":
    main()
