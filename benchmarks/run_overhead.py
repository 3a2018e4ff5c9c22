"""The run pipeline's own cost per case, excluding recording and the diagnoser.

Runs N fake cases (tiny pre-made bundles, no recording) through ``run_diagnoser`` with the ``null``
diagnoser (in a worker process) and with a trivial ``cmd:`` diagnoser, and prints:

* the first-case cost of starting a worker (paid once per job slot);
* per case: wall time of the diagnose phase divided by N, minus the diagnoser's own seconds. That is
  the round trip to the worker (or the spawn of the command), scoring, and the fsynced writes.

Usage: python benchmarks/run_overhead.py [N]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from run_fakes import FakeEvidence, make_case, make_case_set  # noqa: E402

import diageval.run.pipeline as run_module  # noqa: E402
from diageval.run.registry import resolve_diagnoser  # noqa: E402
from diageval.run.store import RunStore  # noqa: E402
from diageval.run.worker import WorkerExecutor  # noqa: E402


def measure(spec: str, n: int, tmp: Path) -> None:
    case_set = make_case_set([make_case(f"bench-{i:04d}") for i in range(n)])
    evidence = FakeEvidence(tmp / "bundles")
    for lc in case_set.cases:  # make the bundles up front: not part of what is measured
        evidence(lc)
    phases: dict[str, float] = {}
    original_diagnose_all = run_module._Pipeline.diagnose_all
    original_summarize = run_module.summarize_run

    def timed_diagnose_all(self, ready):
        start = time.perf_counter()
        try:
            return original_diagnose_all(self, ready)
        finally:
            phases["diagnose"] = time.perf_counter() - start

    def timed_summarize(*a, **kw):
        start = time.perf_counter()
        try:
            return original_summarize(*a, **kw)
        finally:
            phases["summary"] = time.perf_counter() - start

    run_module._Pipeline.diagnose_all = timed_diagnose_all
    run_module.summarize_run = timed_summarize
    try:
        start = time.perf_counter()
        out = run_module.run_diagnoser(
            resolve_diagnoser(spec), case_set, cases_dir=tmp, out_dir=tmp / "runs", run_id=f"bench-{abs(hash(spec))}",
            evidence_fn=evidence, progress=None, cuda_device_count=lambda: 0,
        )
        total = time.perf_counter() - start
    finally:
        run_module._Pipeline.diagnose_all = original_diagnose_all
        run_module.summarize_run = original_summarize
    rows = RunStore(out.run_dir).read_results()
    diag_seconds = sum(r.seconds or 0.0 for r in rows)
    per_case = (phases["diagnose"] - diag_seconds) / n
    print(f"{spec[:40]:<40} n={n}  total {total:6.2f} s  diagnose phase {phases['diagnose']:6.2f} s  "
          f"diagnoser's own {diag_seconds:6.3f} s  summary {phases['summary']:5.2f} s")
    print(f"{'':<40} harness overhead per case (diagnose phase - diagnoser) = {per_case * 1e3:.2f} ms")


def worker_start(tmp: Path, repeats: int = 5) -> None:
    case_set = make_case_set([make_case("start-probe")])
    evidence = FakeEvidence(tmp / "bundles")
    bundle = evidence(case_set.cases[0]).bundle_dir
    times = []
    for _ in range(repeats):
        ex = WorkerExecutor("null", corpus_json=None, log_path=tmp / "worker.log")
        start = time.perf_counter()
        ex.attempt(bundle, tmp / "probe", 30)
        times.append(time.perf_counter() - start)
        ex.close()
    print(f"worker start + first case (null): median {statistics.median(times) * 1e3:.0f} ms over {repeats}")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    with tempfile.TemporaryDirectory(prefix="diageval-bench-") as tmp:
        tmp = Path(tmp)
        worker_start(tmp)
        measure("null", n, tmp)
        measure("cmd:echo '{\"findings\": []}'", n, tmp)


if __name__ == "__main__":
    main()
