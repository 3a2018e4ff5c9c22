"""The run pipeline's own cost per case, excluding recording and the diagnoser; and what the sandbox adds.

Runs N fake cases (tiny pre-made bundles, no recording) through ``run_diagnoser`` with the ``null``
diagnoser (in a worker process) and with a trivial ``cmd:`` diagnoser, once with the sandbox
(``isolation: bwrap``) and once without (``none``), and prints:

* the first-case cost of starting a worker (paid once per job slot), with and without the sandbox;
* per case: wall time of the diagnose phase divided by N, minus the diagnoser's own seconds. That is
  the private bundle copy and its checksums, the round trip to the worker, scoring, and the fsynced
  writes (a ``cmd:`` diagnoser's own seconds include starting its process and its box);
* what the sandbox adds per case: the difference of the whole diagnose phase per case, bwrap - none;
* ``rules`` over the real bundles of the cache (``$DIAGEVAL_HOME/bundles/evidence``, recorded with
  ``diageval record``): the whole diagnose phase (worker start included), sandboxed and not, median of
  ``--repeats`` alternating rounds, and their ratio.

Usage: python benchmarks/run_overhead.py [N] [--repeats R]
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from run_fakes import FakeEvidence, make_case, make_case_set, timed_fake_run  # noqa: E402

import diageval.run.pipeline as run_module  # noqa: E402
from diageval.hosting import Host, HostPolicy  # noqa: E402
from diageval.hosting import sandbox_problem as probe  # noqa: E402
from diageval.run.store import RunStore  # noqa: E402


def measure(spec: str, n: int, tmp: Path, isolation: str) -> float:
    run = timed_fake_run(spec, n, tmp / "bundles", run_module.RunOptions(
        cases_dir=tmp, out_dir=tmp / "runs", run_id=f"bench-{isolation}-{abs(hash(spec))}"),
        HostPolicy(sandbox=isolation != "none"))
    out = run.outcome
    rows = RunStore(out.run_dir).read_results()
    diag_seconds = sum(r.seconds or 0.0 for r in rows)
    per_case = (run.diagnose_s - diag_seconds) / n
    print(f"{spec[:34]:<34} {out.info.isolation:<5} n={n}  total {run.run_s:6.2f} s  diagnose phase {run.diagnose_s:6.2f} s  "
          f"diagnoser's own {diag_seconds:6.3f} s  overhead/case {per_case * 1e3:6.2f} ms")
    return run.diagnose_s / n


def worker_start(tmp: Path, isolation: str, repeats: int = 5) -> float:
    case_set = make_case_set([make_case("start-probe")])
    bundle = FakeEvidence(tmp / "bundles")(case_set.cases[0]).bundle_dir
    policy = HostPolicy(sandbox=isolation != "none", timeout_s=30, runs_dir=tmp / "runs", cases_dir=tmp / "cases")
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        hosted = Host.open("null", policy)
        ex = hosted.slot()
        ex.diagnose(bundle, None, bundle_id=secrets.token_hex(16))
        times.append(time.perf_counter() - start)
        ex.close()
        hosted.close()
    median = statistics.median(times)
    print(f"worker start + first case (null, {isolation}): median {median * 1e3:.0f} ms over {repeats}")
    return median


def corpus_bundles() -> list[Path]:
    """The cache's latest bundle of each case (repeat 0, not a twin), per its index.jsonl."""
    import json

    from diageval.paths import bundle_cache_dir
    from diageval.recording.cache import bundles_root

    cache = bundle_cache_dir()
    latest: dict[str, Path] = {}
    index = cache / "index.jsonl"
    for line in index.read_text().splitlines() if index.is_file() else []:
        row = json.loads(line)
        folder = bundles_root(cache) / row["key"]
        if row.get("role", "case") == "case" and row.get("repeat", 0) == 0 and (folder / "bundle.json").is_file():
            latest[row["case_id"]] = folder
    return [latest[c] for c in sorted(latest)]


def rules_over_cache(repeats: int) -> None:
    bundles = corpus_bundles()
    if not bundles:
        print("rules over the cache: no recorded bundles (run `diageval record CASE...` first)")
        return
    times: dict[str, list[float]] = {"bwrap": [], "none": []}
    for _ in range(repeats):
        for isolation in ("none", "bwrap"):
            start = time.perf_counter()
            hosted = Host.open("rules", HostPolicy(sandbox=isolation != "none"))
            ex = hosted.slot()
            for b in bundles:
                attempt = ex.diagnose(b, None, bundle_id=secrets.token_hex(16))
                assert attempt.status in ("ok", "diagnoser_error"), attempt
            ex.close()
            hosted.close()
            times[isolation].append(time.perf_counter() - start)
    size = sum(f.stat().st_size for b in bundles for f in b.rglob("*") if f.is_file())
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"rules over {len(bundles)} cached case bundles ({size / 1e6:.1f} MB on disk), worker start included, median of {repeats}: "
          f"none {med['none']:.2f} s [{min(times['none']):.2f}, {max(times['none']):.2f}], "
          f"bwrap {med['bwrap']:.2f} s [{min(times['bwrap']):.2f}, {max(times['bwrap']):.2f}], "
          f"ratio {med['bwrap'] / med['none']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("n", nargs="?", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    why = probe()
    if why:
        print(f"no sandbox here ({why}): only isolation none is measured")
    isolations = ["none"] if why else ["none", "bwrap"]
    with tempfile.TemporaryDirectory(prefix="diageval-bench-") as tmp:
        tmp = Path(tmp)
        for iso in isolations:
            worker_start(tmp, iso)
        for spec in ("null", "cmd:echo '{\"findings\": []}'"):
            got = {iso: measure(spec, args.n, tmp, iso) for iso in isolations}
            if len(got) == 2:  # a cmd: diagnoser's own seconds include starting its box: compare whole phases
                print(f"{'':<34} the sandbox adds {(got['bwrap'] - got['none']) * 1e3:.2f} ms per case "
                      f"(diagnose phase per case: {got['none'] * 1e3:.1f} -> {got['bwrap'] * 1e3:.1f} ms)")
    if not why:
        rules_over_cache(args.repeats)


if __name__ == "__main__":
    main()
