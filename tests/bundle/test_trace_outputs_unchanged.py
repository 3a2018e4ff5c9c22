"""The trace readers' outputs, pinned: every summary, ``trace stats`` table and ``rules`` diagnosis over the real
traces and a set of seeded synthetic bundles is the same, byte for byte, as the reader of main 47db7f0 gave.

Issue 43 changes how traces are read (typed decoding, one pass where one suffices) and promises the same figures.
``tests/bundle/trace_outputs_golden.json`` holds the sha256 of each output as that reader gave it (written by
``python tests/bundle/test_trace_outputs_unchanged.py --write`` before any change to how windows are decoded or
collected: 47db7f0's decode path, with the two output fixes of 8cc9e22 and ad9a3c5 that the digests must include,
bare-array traces read and tied threads listed by id; a reader change that alters a digest says why in its commit,
and rewrites the file): small,
and no copy of anyone's trace. Real traces are named by their path under the real-traces folder and their own
sha256: a file whose bytes differ from the ones the digests were made from is skipped, saying so, as is a folder
that is absent.

What is pinned, per input (times that measure the machine are left out: ``parse_seconds``, ``seconds``):
``summarize_trace`` (and, on inputs that pass the column budget, the sliced read at a small budget), ``trace_stats``
with its table, and ``RulesDiagnoser().diagnose`` of the input's bundle.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from real_trace_data import real_traces_dir  # noqa: E402

GOLDEN = Path(__file__).with_name("trace_outputs_golden.json")
SMALL_BUDGET = 5_000  # column entries: the repeated real trace (~4 MB, ~21k entries) is then read in slices


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _pinned(path: Path, make) -> str:
    """The sha256 of ``make()``'s text, or the error a person would see (its class and message, the file's folder
    left out) when the reader refuses the input."""
    from diageval.errors import DiagevalError

    try:
        return _sha(make().encode())
    except DiagevalError as exc:
        return f"{type(exc).__name__}: {str(exc).replace(str(path.parent), '<dir>')}"


def _trace_outputs(path: Path, *, sliced: bool = False) -> dict[str, str]:
    from diageval.bundle.trace_stats import trace_stats
    from diageval.bundle.trace_stats_table import format_table
    from diageval.bundle.trace_summary import summarize_trace

    def stats():
        s = trace_stats(path)
        s.seconds = 1.0
        return s

    out = {"summary": _pinned(path, lambda: summarize_trace(path).model_dump_json(exclude={"parse_seconds", "path"}))}
    if sliced:
        out["summary sliced"] = _pinned(path, lambda: summarize_trace(path, max_entries=SMALL_BUDGET)
                                        .model_dump_json(exclude={"parse_seconds", "path"}))
    out["stats"] = _pinned(path, lambda: stats().model_dump_json(exclude={"seconds", "path"}))
    out["stats table"] = _pinned(path, lambda: format_table(stats()))
    return out


def _rules(bundle: Path, budget: int | None = None) -> str:
    from diageval.bundle import trace_summary
    from diageval.bundle.model import EvidenceBundle
    from diageval.diagnosers.rules.diagnoser import RulesDiagnoser

    defaults = trace_summary.summarize_trace.__kwdefaults__
    saved = dict(defaults)
    if budget is not None:  # rules' read at a small column budget: the slice pass, observers included
        defaults["max_entries"] = budget
    try:
        diagnosis = RulesDiagnoser().diagnose(EvidenceBundle.open(bundle))
    finally:
        defaults.update(saved)
    # cites (issue 41) is the findings' own ranks and steps again (rules.diagnoser.cited): pinned through them, so the
    # digests stay those of the reader
    return diagnosis.model_dump_json(exclude={"findings": {"__all__": {"cites"}}})


def _real_inputs() -> list[tuple[str, Path]]:
    root = real_traces_dir()
    if root is None:
        return []
    return sorted((str(p.relative_to(root)), p) for p in root.rglob("*")
                  if p.is_file() and p.name.endswith((".json", ".json.gz")))


def _real_outputs(rel: str, path: Path, tmp: Path) -> dict[str, str]:
    from diageval.bundle.importer import import_traces

    out = {"input sha256": _sha(path.read_bytes()), **_trace_outputs(path)}
    out["rules"] = _pinned(path, lambda: _rules(import_traces([path], tmp / "bundle")))
    return out


def _synthetic_inputs() -> dict[str, object]:
    """name -> a function that writes the input under a folder and returns (trace file, bundle folder)."""
    from gpu_traces import gpu_trace
    from synthetic_traces import StepShape, build_bundle

    def cpu(shape, **kw):
        def make(root: Path) -> tuple[Path, Path]:
            bundle = build_bundle(root / "bundle", shape, **kw)
            return bundle / "rank0" / "trace.json.gz", bundle
        return make

    def gpu(**kw):
        def make(root: Path) -> tuple[Path, Path]:
            from diageval.bundle.importer import import_traces

            trace = gpu_trace(root / "rank0.json", **kw)
            return trace, import_traces([trace], root / "bundle")
        return make

    def slow_data(rank: int, step: int) -> StepShape:
        return StepShape(data_us=6000.0) if rank == 1 and step % 2 else StepShape()

    def straggler(rank: int, step: int) -> StepShape:
        return StepShape(compute_us=9000.0) if rank == 2 else StepShape()

    def many_small(rank: int, step: int) -> StepShape:
        return StepShape(n_ops=400, collectives=3, payload_floats=1 << 20)

    return {
        "cpu healthy": cpu(lambda r, s: StepShape()),
        "cpu slow data": cpu(slow_data, world_size=2, n_steps=24),
        "cpu straggler": cpu(straggler, world_size=4, n_steps=16),
        "cpu many small ops": cpu(many_small, world_size=2, n_steps=12),
        "cpu truncated": cpu(lambda r, s: StepShape(), truncate={0: 0.7}),
        "gpu healthy": gpu(),
        "gpu pageable copies": gpu(pageable_block_us=2000.0, steps=6),
        "gpu launch bound": gpu(kernel_us=5.0, gap_us=60.0, kernels=60),
        "gpu legacy": gpu(legacy=True),
        "gpu no device events": gpu(device_events=False),
    }


def _repeated_real(tmp: Path) -> Path | None:
    """The A100 rank-0 trace repeated to ~4 MB with shifted times (``benchmarks/big_trace.py``'s builder)."""
    root = real_traces_dir()
    source = root / "gpu-jobs/hta-negative-queue/rank0.json.gz" if root else None
    if source is None or not source.is_file():
        return None
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from big_trace import build_trace

    out = tmp / "rank0.json"
    build_trace(source, 4.0, out)
    return out


def _repeated_outputs(tmp: Path) -> dict[str, str] | None:
    from diageval.bundle.importer import import_traces

    trace = _repeated_real(tmp)
    if trace is None:
        return None
    out = {"input sha256": _sha(trace.read_bytes()), **_trace_outputs(trace, sliced=True)}
    bundle = import_traces([trace], tmp / "bundle")
    out["rules"] = _sha(_rules(bundle).encode())
    out["rules sliced"] = _sha(_rules(bundle, SMALL_BUDGET).encode())
    return out


def _golden() -> dict:
    if not GOLDEN.is_file():
        pytest.fail(f"{GOLDEN} is missing (written by `python {Path(__file__).name} --write` on the old reader)")
    return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("name", sorted(_synthetic_inputs()))
def test_synthetic_outputs_are_unchanged(tmp_path, name):
    trace, bundle = _synthetic_inputs()[name](tmp_path)
    got = {**_trace_outputs(trace), "rules": _sha(_rules(bundle).encode())}
    assert got == _golden()["synthetic"][name]


REAL = _real_inputs()


@pytest.mark.skipif(not REAL, reason="the real traces (../shared/real-traces or $DIAGEVAL_DATA) are not here")
@pytest.mark.parametrize("rel", [r for r, _ in REAL] or ["-"])
def test_real_trace_outputs_are_unchanged(tmp_path, rel):
    want = _golden()["real"].get(rel)
    if want is None:
        pytest.skip(f"{rel}: no digests pinned for this file (added to the data folder after they were made)")
    path = dict(REAL)[rel]
    if _sha(path.read_bytes()) != want["input sha256"]:
        pytest.skip(f"{rel}: its bytes differ from those the digests were made from")
    assert _real_outputs(rel, path, tmp_path) == want


def test_a_repeated_real_trace_read_whole_and_in_slices_is_unchanged(tmp_path):
    got = _repeated_outputs(tmp_path)
    if got is None:
        pytest.skip("the A100 rank-0 trace (gpu-jobs/hta-negative-queue) is not here")
    want = _golden()["repeated"]
    if got["input sha256"] != want["input sha256"]:
        pytest.skip("the repeated trace's bytes differ from those the digests were made from")
    assert got == want
    assert got["summary sliced"] == got["summary"] and got["rules sliced"] == got["rules"]


def test_the_small_budget_reads_the_repeated_trace_in_slices(tmp_path, monkeypatch):
    """The sliced rows above pin the slice pass only if the small budget makes one."""
    from diageval.bundle import trace_summary

    trace = _repeated_real(tmp_path)
    if trace is None:
        pytest.skip("the A100 rank-0 trace (gpu-jobs/hta-negative-queue) is not here")
    reads = []
    read = trace_summary.iter_trace_windows
    monkeypatch.setattr(trace_summary, "iter_trace_windows", lambda *a, **kw: reads.append(1) or read(*a, **kw))
    trace_summary.summarize_trace(trace, max_entries=SMALL_BUDGET)
    assert len(reads) >= 2


def _write() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        synthetic = {}
        for name, make in sorted(_synthetic_inputs().items()):
            trace, bundle = make(root / name.replace(" ", "-"))
            synthetic[name] = {**_trace_outputs(trace), "rules": _sha(_rules(bundle).encode())}
        real = {rel: _real_outputs(rel, path, root / "real" / str(i)) for i, (rel, path) in enumerate(REAL)}
        (root / "rep").mkdir()
        repeated = _repeated_outputs(root / "rep")
    GOLDEN.write_text(json.dumps({"synthetic": synthetic, "real": real, "repeated": repeated}, indent=1,
                                 sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}: {len(synthetic)} synthetic, {len(real)} real inputs")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: python {sys.argv[0]} --write")
    _write()
