"""Issue 44, item 6: ``diageval bundle import`` refuses an event whose ``dur`` is negative, NaN or infinite, or whose
``ts`` is NaN or infinite (a negative ``ts`` is a point before the clock's origin, as in a trace shifted by hand), naming the file and the event (its index in ``traceEvents``, its name), exit 1 and no traceback, and
leaves no bundle. hta showed its own traceback on such a bundle before the diagnoser error.

The bad event is placed early (the first window) and late (past several decode windows), and is written both as
something msgspec decodes (a negative number: the reader's fast path) and as something only the ``json`` fallback
reads (``NaN``, ``Infinity``, ``1e999``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from diageval.bundle.importer import TraceImportError, import_traces, read_trace_facts
from diageval.bundle.trace_stream import WINDOW_BYTES
from diageval.cli import main


def events(n: int) -> list[dict]:
    """``n`` CPU ops, each ~110 bytes of JSON, with ProfilerStep spans among them."""
    out = []
    for i in range(n):
        if i % 100 == 0:
            out.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i // 100}", "pid": 1, "tid": 1,
                        "ts": 1000 + i * 10, "dur": 1000})
        else:
            out.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1000 + i * 10,
                        "dur": 5})
    return out


def write(path: Path, evs: list[dict], bad_at: int, field: str, token: str) -> Path:
    """A trace whose event ``bad_at`` (renamed ``the-bad-one``) has ``field`` written as the JSON ``token``."""
    evs = [dict(e) for e in evs]
    evs[bad_at]["name"] = "the-bad-one"
    evs[bad_at][field] = "@BAD@"
    text = json.dumps({"schemaVersion": 1, "traceEvents": evs}).replace('"@BAD@"', token)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(text.encode()) if path.name.endswith(".gz") else text.encode())
    return path


BAD = [("dur", "NaN"), ("dur", "Infinity"), ("dur", "-Infinity"), ("dur", "-5"), ("dur", "-0.5"), ("dur", "1e999"),
       ("ts", "NaN"), ("ts", "Infinity"), ("ts", "-1e999")]


@pytest.mark.parametrize("where", [3, 9_000], ids=["first-window", "late-window"])
@pytest.mark.parametrize(("field", "token"), BAD, ids=[f"{f}={t}" for f, t in BAD])
def test_a_negative_or_non_finite_time_is_refused_naming_file_and_event(tmp_path, field, token, where):
    evs = events(10_000)
    assert len(json.dumps(evs[:where])) > 3 * WINDOW_BYTES or where < 10  # late: several windows in
    trace = write(tmp_path / "src" / "rank0.json.gz", evs, where, field, token)
    result = CliRunner().invoke(main, ["bundle", "import", str(trace), "--out", str(tmp_path / "b")])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    line = next(x for x in result.output.splitlines() if "traceEvents event" in x)
    assert f"{trace}: traceEvents event {where} (name 'the-bad-one'): {field} = " in line, line
    assert ("expected a finite number >= 0" if field == "dur" else "expected a finite number (microseconds)") in line
    assert not (tmp_path / "b").exists() and [p.name for p in tmp_path.iterdir()] == ["src"]


@pytest.mark.parametrize(("field", "token", "shown"), [("dur", "NaN", "dur = nan"), ("dur", "-5", "dur = -5"),
                                                        ("ts", "Infinity", "ts = inf")])
def test_the_message_shows_the_value(tmp_path, field, token, shown):
    trace = write(tmp_path / "t.json", events(20), 7, field, token)
    with pytest.raises(TraceImportError, match=rf"traceEvents event 7 \(name 'the-bad-one'\): {shown}, expected"):
        read_trace_facts(trace)


def test_zero_and_large_finite_times_import_and_a_string_time_is_left_to_the_readers(tmp_path):
    """Positive controls: a zero duration, a ts at 0 and epoch-microsecond ts import; a ts that is not a number
    was never a time to check and still imports (readers skip it, as before)."""
    evs = events(50)
    evs[1]["dur"] = 0
    evs[2]["ts"] = 0
    evs[6]["ts"] = -1  # before the clock's origin: a time all the same
    evs[3]["ts"] = 1.7e15
    evs[4]["ts"] = "12"
    evs[5]["dur"] = None
    trace = tmp_path / "src" / "rank0.json"
    trace.parent.mkdir()
    trace.write_text(json.dumps({"schemaVersion": 1, "traceEvents": evs}))
    out = import_traces([trace], tmp_path / "b")
    assert (out / "rank0" / "trace.json.gz").is_file()
    facts = read_trace_facts(trace)
    assert [s[0] for s in facts.steps] == [0]
