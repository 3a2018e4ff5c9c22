"""Calibration of the manifestation test (issue 22 item 1): its A/A false-manifest rate and the positive
rungs' manifest rate, each with n and a Clopper-Pearson 95% interval, measured on this machine as it is.

A/A: for the most common healthy twins of the CPU positive cases, a pool of ``--pool`` recordings of the
twin is made back to back (as verify makes a pair), and cut into adjacent pairs (recording 2j, 2j+1).
One A/A comparison is the sequential test of a case that uses that twin, run on up to ``LOOKS[-1]`` of those
pairs drawn at random (random order and random orientation): the twin against itself, with the case's
metric, step range and min_ratio (and again with min_ratio 1.1, the lowest a rung near the detection limit
would claim). Comparisons drawn from one pool share recordings, so they are not independent: the interval
printed treats them as if they were (it is narrower than the truth); the number of disjoint comparisons
the pool allows is printed beside it.

Positive: ``--rounds`` full verifies of the CPU positive cases (or ``--cases``), each round in a cache
folder of its own under ``HOME`` (so every round records afresh; twins shared within a round as in a real
verify). Each round's wall time is one whole-corpus verify (issue 22 item 6). The positive rate is over
(case, round) and counts the manifestation test's decision; a label check that fails
(:mod:`diageval.recording.label_support`) is printed beside it, not counted here.

Usage: python benchmarks/manifestation_calibration.py HOME [--pool 40] [--workloads 3] [--comparisons 210]
       [--rounds 2] [--cases ID ...] [--skip-aa] [--skip-positive] [--seed 0]
HOME is reused: recordings already there are not made again (delete it for a fresh measurement); the A/A
pool is found through HOME's index even when the recording code changed since.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections import Counter
from pathlib import Path

from scipy.stats import beta

from diageval.bundle.model import EvidenceBundle
from diageval.cases.load import load_case_set
from diageval.recording.cache import ensure_bundle
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


def aa(home: Path, cases, pool: int, workloads: int, comparisons: int, rng: random.Random) -> None:
    by_twin: dict[str, list] = {}
    for c in cases:
        by_twin.setdefault(c.healthy_twin().spec_hash(), []).append(c)
    chosen = sorted(by_twin.values(), key=len, reverse=True)[:workloads]
    cache = home / "aa"
    started = time.perf_counter()
    pools = []
    for group in chosen:
        twin = group[0].healthy_twin()
        made = pool_index(cache, group[0].id)
        steps = []
        for i in range(pool):
            folder = made.get(i)
            if folder is None:
                _, folder, _ = ensure_bundle(twin, "cpu", repeat=i, cache_dir=cache, role="twin")
            steps.append(EvidenceBundle.open(folder).steps())
        pairs = [(steps[2 * j], steps[2 * j + 1]) for j in range(pool // 2)]
        pools.append((group, pairs))
        print(f"A/A pool: twin of {group[0].id} ({twin.workload.name}, {twin.workload.steps} steps, shared by "
              f"{len(group)} cases): {pool} recordings, {len(pairs)} adjacent pairs", flush=True)
    print(f"A/A pool recorded in {time.perf_counter() - started:.0f} s; {load()}", flush=True)
    cap = LOOKS[-1]
    per = -(-comparisons // len(pools))
    counts: Counter = Counter()
    for group, pairs in pools:
        for _ in range(per):
            case = rng.choice(group)
            drawn = rng.sample(pairs, min(cap, len(pairs)))
            drawn = [(a, b) if rng.random() < 0.5 else (b, a) for a, b in drawn]
            healthy, injected = [a for a, _ in drawn], [b for _, b in drawn]
            for label, min_ratio in (("own", case.manifest.min_ratio), ("1.1", 1.1)):
                c = case.model_copy(update={"manifest": case.manifest.model_copy(update={"min_ratio": min_ratio})})
                v = compare(c, injected, healthy)
                counts[(label, "manifested")] += v.manifested
                counts[(label, "significant")] += bool(v.test and v.test.p_value < v.test.alpha)
                counts[(label, "pairs", v.repeats)] += 1
            counts["n"] += 1
    n = counts["n"]
    disjoint = sum(len(p) // cap for _, p in pools)
    print(f"A/A comparisons: {n} (drawn from {sum(len(p) for _, p in pools)} pairs; {disjoint} disjoint comparisons "
          f"of {cap} pairs the pools allow)")
    for label in ("own", "1.1"):
        what = "the case's own min_ratio" if label == "own" else "min_ratio 1.1"
        print(rate_line(f"  A/A false-manifest rate at {what}", counts[(label, "manifested")], n))
    print(rate_line("  A/A p-value below its alpha at some look (ignoring min_ratio)", counts[("own", "significant")], n))


def positive(home: Path, case_ids: list[str], rounds: int) -> None:
    hits: Counter = Counter()
    pairs_used: Counter = Counter()
    total = 0
    for r in range(rounds):
        cache = home / f"round{r}"
        before = load()
        started = time.perf_counter()
        results = []
        for case_id in case_ids:  # one at a time, printed as it ends (a stopped run still says what it saw)
            t0 = time.perf_counter()
            for _, v in verify_cases([case_id], repeats=None, device="cpu", cache_dir=cache):
                results.append((case_id, v))
                passed = bool(v.test and v.test.manifested)  # the test's decision (labels' own checks apart)
                hits[case_id] += passed
                pairs_used[v.repeats] += 1
                total += 1
                problems = getattr(v, "label_problems", None) or []
                print(f"  round {r} {case_id}: test manifested={passed} ratio={v.ratio:.2f} (min {v.min_ratio}) "
                      f"pairs={v.repeats} z={v.test.statistic:.1f} p={v.test.p_value:.1e} noise={v.noise:.2f} "
                      f"difficulty={v.difficulty} {time.perf_counter() - t0:.0f} s"
                      + (f"; label check: {'; '.join(map(str, problems))}" if problems else ""), flush=True)
        wall = time.perf_counter() - started
        missed = [c for c, v in results if not (v.test and v.test.manifested)]
        print(f"round {r}: {len(results)} cases verified in {wall:.0f} s ({before} before, {load()} after); "
              f"missed: {', '.join(missed) or 'none'}", flush=True)
    k = sum(hits.values())
    print(rate_line("positive rungs' manifest rate over (case, round)", k, total))
    print("pairs used per verify:", dict(sorted(pairs_used.items())))
    short = {c: h for c, h in hits.items() if h < rounds}
    for c, h in sorted(short.items()):
        print(f"  {c}: manifested in {h}/{rounds} rounds")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("home", type=Path)
    ap.add_argument("--pool", type=int, default=40)
    ap.add_argument("--workloads", type=int, default=3)
    ap.add_argument("--comparisons", type=int, default=210)
    ap.add_argument("--rounds", type=int, default=2)
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
        aa(args.home, cases, args.pool, args.workloads, args.comparisons, random.Random(args.seed))
    if not args.skip_positive:
        positive(args.home, [c.id for c in cases], args.rounds)


if __name__ == "__main__":
    main()
