"""The shared trace reader: exactly what json.load reads, whatever the window size; honest truncation;
bad input named with file and byte offset; bounded memory against hostile files."""

from __future__ import annotations

import gzip
import json
import random
import zlib
from pathlib import Path

import pytest

import diageval.bundle.trace_stream as ts
from diageval.bundle.trace_stream import (
    StreamState,
    TraceFormatError,
    TraceTooLargeError,
    event_from_dict,
    iter_trace_events,
)

FIELDS = ("ph", "cat", "name", "tid", "ts", "dur")  # what the reader keeps; the rest is skipped while decoding
ODD_STRINGS = ['}, {"x": 1}', '}]', 'quote \\" and }', "back\\\\slash", "naïve µs ✓", "", "{[", "\\u00e9"]


def _event(rng: random.Random, i: int) -> object:
    """One element of traceEvents, now and then something a window cut can stumble on."""
    roll = rng.random()
    if roll < 0.03:
        return rng.choice([7, None, "text", [1, {"a": 2}], []])  # not an object: skipped by the reader
    ev: dict = {"ph": rng.choice("XXXsfiM"), "cat": rng.choice(["cpu_op", "kernel", "user_annotation"]),
                "name": rng.choice(["aten::mm", f"ProfilerStep#{i}"] + ODD_STRINGS), "pid": rng.choice([1, "p"]),
                "tid": rng.choice([3, "stream 7"]), "ts": rng.choice([1000 + i, 1000.25 + i, 1.7e15 + i])}
    if rng.random() < 0.7:
        ev["dur"] = rng.choice([5, 0.5])
    if rng.random() < 0.5:
        ev["args"] = {"Input Dims": [[2, 3], []], "nested": [{"a": rng.choice(ODD_STRINGS)}, {"b": [{}]}],
                      "s": rng.choice(ODD_STRINGS)}
    if rng.random() < 0.1:
        ev["id"] = i
    if rng.random() < 0.05:
        ev["extra"] = {"deep": [[[{"x": "}, {"}]]]}
    if rng.random() < 0.02:
        ev[rng.choice(["ph", "cat", "name"])] = rng.choice([5, None, ["x"]])  # read as None
    return ev


def _document(seed: int, n: int = 300, *, indent: int | None = None) -> tuple[bytes, list]:
    rng = random.Random(seed)
    events = [_event(rng, i) for i in range(n)]
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU } ]"}], "traceEvents": events,
           "baseTimeNanoseconds": 1790000000000000000, "traceName": "t"}
    return json.dumps(doc, indent=indent, ensure_ascii=rng.random() < 0.5).encode(), events


def _read(path: Path, **kw) -> tuple[list, StreamState]:
    state = StreamState()
    return list(iter_trace_events(path, state, **kw)), state


def _as_dicts(events) -> list[dict]:
    return [{k: getattr(e, k) for k in FIELDS} | {"args": e.decoded_args()} for e in events]


def _expected(events: list) -> list[dict]:
    """What the reader promises for each object: ph/cat/name only as strings, the rest as written."""
    return [{k: e.get(k) if k not in ("ph", "cat", "name") or isinstance(e.get(k), str) else None for k in FIELDS}
            | {"args": e.get("args", {})} for e in events if isinstance(e, dict)]


@pytest.mark.parametrize("chunk, min_window", [(1 << 20, 4096), (256, 16), (64, 8), (7, 4096)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reads_exactly_what_json_load_reads(tmp_path, monkeypatch, chunk, min_window, seed):
    monkeypatch.setattr(ts, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(ts, "_MIN_WINDOW", min_window)
    data, events = _document(seed, indent=2 if seed % 2 else None)
    for path in (tmp_path / "t.json", tmp_path / "t.json.gz"):
        path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
        got, state = _read(path)
        assert _as_dicts(got) == _expected(events)
        assert state.n_events == len(got) and state.truncated is None and state.has_trace_events
        assert state.json_bytes == len(data)
        assert state.header == {k: v for k, v in json.loads(data).items() if k != "traceEvents"}


def test_a_bare_array_of_events_is_read_like_the_object_form(tmp_path, monkeypatch):
    """The Chrome trace format's other form, which torch 1.8's Kineto wrote (three real traces in the shared folder):
    ``[{event}, ...]`` with no header. The same events as the object form; cut short, the events before the cut and
    ``truncated`` set, never an error."""
    monkeypatch.setattr(ts, "CHUNK_BYTES", 256)
    monkeypatch.setattr(ts, "_MIN_WINDOW", 16)
    _, events = _document(7, n=400)
    data = json.dumps(events, indent=1).encode()
    got, state = _read_file(tmp_path / "array.json", data)
    assert _as_dicts(got) == _expected(events)
    assert state.truncated is None and state.has_trace_events and state.header == {} and state.json_bytes == len(data)
    cut, state = _read_file(tmp_path / "cut.json", data[: len(data) // 2])
    assert state.truncated and 0 < len(cut) < len(got) and _as_dicts(cut) == _as_dicts(got)[: len(cut)]


def test_a_cut_inside_a_string_is_never_an_error(tmp_path):
    """The valid twin of the big malformed file below: a window whose cut fell inside a string (an odd string holds
    ``}, {``) and that holds an element which is no object is read with ``json``, which can fail before the window's
    end; that is a cut to narrow, not a malformed file (the reader raised here with 128 kB windows)."""
    data, events = _document(6, n=20000)
    got, state = _read_file(tmp_path / "good.json", data)
    assert _as_dicts(got) == _expected(events) and state.truncated is None


def test_numbers_json_accepts_but_msgspec_does_not(tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents": [{"ts": NaN, "dur": Infinity, "args": {"x": -Infinity}}, {"ts": 1e999}]}')
    got, state = _read(p)
    assert got[0].ts != got[0].ts and got[0].dur == float("inf") and got[0].decoded_args() == {"x": float("-inf")}
    assert got[1].ts == float("inf") and state.truncated is None


def test_every_cut_point_is_truncation_never_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(ts, "CHUNK_BYTES", 64)
    monkeypatch.setattr(ts, "_MIN_WINDOW", 8)
    data, events = _document(5, n=12)
    full = _as_dicts(_read_file(tmp_path / "full.json", data)[0])
    for k in range(len(data) - 1):
        got, state = _read_file(tmp_path / "cut.json", data[:k])
        assert state.truncated, k
        assert _as_dicts(got) == full[: len(got)], k  # a prefix of the events, nothing invented


def _read_file(path: Path, data: bytes):
    path.write_bytes(data)
    return _read(path)


def test_cut_gzip_is_truncation(tmp_path):
    data, events = _document(4, n=2000)
    packed = gzip.compress(data)
    got, state = _read_file(tmp_path / "t.json.gz", packed[: len(packed) // 2])
    assert state.truncated and state.truncated.startswith("compressed stream ends early")
    assert 0 < len(got) < len(events)


@pytest.mark.parametrize(
    "text, where, what",
    [
        ('{"traceEvents": [{"ph": "X"} {"ph": "X"}]}', 29, "invalid JSON"),
        ('{"traceEvents": [{"ph": "X"}, {"ph": "X", }]}', 42, "invalid JSON"),
        ('{"traceEvents": [{"ph": "X"},]}', 29, "invalid JSON"),
        ('{"a": tru, "traceEvents": []}', 6, "invalid JSON"),
        ('{"traceEvents": 5}', 16, "'traceEvents' is not an array"),
        ("[1, 2]", 0, "expected a JSON object with a 'traceEvents' array"),
    ],
)
def test_malformed_json_names_file_and_byte(tmp_path, text, where, what):
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(TraceFormatError, match=rf"bad\.json: .*{what}.* at byte {where}$"):
        _read(p)


def test_malformed_far_into_a_big_file_gives_the_absolute_offset(tmp_path):
    data, _ = _document(6, n=20000)
    at = data.index(b'"ph"', len(data) * 3 // 4)
    bad = data[:at] + b"@" + data[at + 1 :]
    with pytest.raises(TraceFormatError, match=rf"invalid JSON: .* at byte {at}$"):
        _read_file(tmp_path / "bad.json.gz", gzip.compress(bad))


def test_invalid_utf8_names_file_and_byte(tmp_path):
    for raw in (b'{"traceEvents": [{"name": "a\xffb"}]}', b'{"traceEvents": [{"args": {"s": "a\xffb"}}]}',
                b'{"host_name": "\xff", "traceEvents": []}'):
        at = raw.index(b"\xff")
        with pytest.raises(TraceFormatError, match=rf"t\.json: not UTF-8 .* at byte {at}$"):
            _read_file(tmp_path / "t.json", raw)


@pytest.mark.parametrize("where", ["event", "header"])
def test_deep_nesting_is_an_error_not_a_crash(tmp_path, where):
    deep = "[" * 100_000 + "]" * 100_000
    text = f'{{"traceEvents": [{{"args": {deep}}}]}}' if where == "event" else f'{{"x": {deep}, "traceEvents": []}}'
    with pytest.raises(TraceFormatError, match=r"t\.json: JSON nested deeper than Python's recursion limit at byte"):
        _read_file(tmp_path / "t.json", text.encode())


def test_a_value_over_the_limit_is_refused_not_buffered(tmp_path, monkeypatch):
    monkeypatch.setattr(ts, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(ts, "MAX_VALUE_BYTES", 1 << 16)
    text = '{"traceEvents": [{"name": "' + "x" * (1 << 18) + '"}]}'
    with pytest.raises(TraceFormatError, match=r"t\.json: a JSON value longer than 65536 bytes .* at byte 17$"):
        _read_file(tmp_path / "t.json", text.encode())


def test_out_of_memory_is_named(tmp_path, monkeypatch):
    class Exhausted:
        def decode(self, data):
            raise MemoryError

    monkeypatch.setattr(ts, "_EVENTS", Exhausted())
    with pytest.raises(TraceFormatError, match=r"t\.json: ran out of memory while reading the trace at byte"):
        _read_file(tmp_path / "t.json", b'{"traceEvents": [{"ph": "X"}]}')


def _gzip_bomb(path: Path, member: bytes, copies: int, head: bytes = b"") -> Path:
    """``head`` then ``copies`` gzip members of ``member``: decompresses to len(member) * copies bytes."""
    packed = gzip.compress(member, compresslevel=9)
    with open(path, "wb") as fh:
        if head:
            fh.write(gzip.compress(head))
        for _ in range(copies):
            fh.write(packed)
    return path


def test_gzip_bomb_of_zeros_is_refused_at_its_first_byte(tmp_path):
    bomb = _gzip_bomb(tmp_path / "bomb.json.gz", bytes(16 << 20), 192)  # 3 GiB of zeros, 3 MB on disk
    state = StreamState()
    with pytest.raises(TraceFormatError, match=r"bomb\.json\.gz: not a Chrome trace: .* found '\\x00' at byte 0$"):
        list(iter_trace_events(bomb, state))
    assert state.json_bytes <= 2 * ts.CHUNK_BYTES


def test_size_cap_stops_a_bomb_of_whitespace(tmp_path):
    bomb = _gzip_bomb(tmp_path / "ws.json.gz", b" " * (16 << 20), 192, head=b'{"traceEvents": [')
    state = StreamState()
    with pytest.raises(TraceTooLargeError, match=r"ws\.json\.gz: decompresses to more than 8388608 bytes") as err:
        list(iter_trace_events(bomb, state, max_json_bytes=8 << 20))
    assert err.value.limit == 8 << 20 and state.json_bytes <= (8 << 20) + 2 * ts.CHUNK_BYTES


def test_many_gzip_members_inflate_to_exactly_their_bytes(tmp_path):
    """Members that end inside a compressed block, with zero padding between two of them."""
    data, events = _document(9, n=3000, indent=2)
    at = data.index(b"[", data.index(b'"traceEvents"')) + 1
    spaces = gzip.compress(b" " * (4 << 20), compresslevel=9)  # members of 4 MiB, many per block read
    pieces = [data[i : i + 50_000] for i in range(at, len(data), 50_000)]
    packed = gzip.compress(data[:at]) + spaces * 12
    packed += b"".join(gzip.compress(p) + (b"\0" * 7 if i == 3 else b"") for i, p in enumerate(pieces))
    got, state = _read_file(tmp_path / "t.json.gz", packed)
    assert state.json_bytes == len(data) + 12 * (4 << 20) and state.truncated is None
    assert _as_dicts(got) == _expected(events)


def test_corrupt_gzip_member_is_truncation(tmp_path):
    data, events = _document(7, n=3000)
    packed = bytearray(gzip.compress(data))
    packed[len(packed) // 2 : len(packed) // 2 + 64] = bytes(64)
    got, state = _read_file(tmp_path / "t.json.gz", bytes(packed))
    assert state.truncated and len(got) < len(events)


def test_header_only_and_empty_files(tmp_path):
    got, state = _read_file(tmp_path / "h.json", b'{"schemaVersion": 1}')
    assert got == [] and not state.has_trace_events and state.truncated is None
    got, state = _read_file(tmp_path / "e.json", b"  ")
    assert got == [] and state.truncated == "empty file"
    got, state = _read_file(tmp_path / "z.json", b'{"traceEvents": []}')
    assert got == [] and state.has_trace_events and state.truncated is None


def test_odd_types_of_ph_cat_name_read_as_none_the_rest_as_written(tmp_path):
    got, state = _read_file(tmp_path / "t.json", b'{"traceEvents": [{"ph": 1, "cat": ["kernel"], "name": {"a": 1},'
                                                  b' "ts": "12", "tid": [1]}, {"ph": "X", "cat": "kernel"}]}')
    assert [(e.ph, e.cat, e.name, e.ts, e.tid) for e in got] == [(None, None, None, "12", [1]),
                                                                 ("X", "kernel", None, None, None)]


def test_event_from_dict_and_decoded_args():
    ev = event_from_dict({"ph": "X", "ts": 3, "args": {"a": [1]}, "other": 1})
    assert (ev.ph, ev.ts, ev.dur, ev.decoded_args()) == ("X", 3, None, {"a": [1]})
    assert event_from_dict({"args": [1, 2]}).decoded_args() == {}  # not an object
    assert event_from_dict({}).decoded_args() == {}


def test_window_cut_is_validated_not_trusted():
    """The reader's only assumption: a prefix that decodes as an array ends on an element boundary."""
    data, _ = _document(8, n=200)
    body = data[data.index(b"[", data.index(b'"traceEvents"')) + 1 :]
    for p in (i for i, c in enumerate(body) if c == ord("}")):
        window = b"[" + body[: p + 1] + b"]"
        try:
            decoded = json.loads(window)
        except json.JSONDecodeError:
            continue
        # it decoded: then the full array continues with a separator right after the cut
        rest = body[p + 1 :].lstrip()
        assert rest[:1] in (b",", b"]"), (p, decoded[-1])


@pytest.mark.parametrize("args", [
    '{"correlation": 5, "x": {"correlation": 7}}', '{"correlation": 1, "correlation": 2}', '{}', '[1]', '7',
    '{"correlation": 1e400}', '{"correlation": "a"}', '{"External id": 3}', '{"correlation": NaN}',
    '{"s": "}\\"correlation\\": 9", "correlation": [1]}',
])
def test_correlation_is_what_decoded_args_holds(tmp_path, args):
    """The join's fast read of ``args.correlation`` agrees with the whole decode, odd input included."""
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [{"ph": "X", "args": ' + args + '}, {"ph": "X"}]}')
    events = list(iter_trace_events(p, StreamState()))
    assert [e.correlation() for e in events] == [e.decoded_args().get("correlation") for e in events]
    assert [e.correlation() for e in events][1] is None
    # the whole window's in one decode (the collectors' read) says the same, event for event
    assert repr(ts.correlations(events)) == repr([e.correlation() for e in events])


def _with_inflater(monkeypatch, module) -> None:
    monkeypatch.setattr(ts, "_inflate_module", module)
    monkeypatch.setattr(ts, "_INFLATE_ERRORS", (zlib.error, module.error))


def test_gzip_is_inflated_by_isal_when_installed():
    """ISA-L's inflater (the ``isal`` dependency) reads gzip; zlib is only the fallback of a checkout without it."""
    isal_zlib = pytest.importorskip("isal.isal_zlib")
    assert ts._inflate_module is isal_zlib


def test_isal_and_zlib_inflate_to_the_same_events_and_stops(tmp_path, monkeypatch):
    """Whole, many members, cut short, damaged: the same events, bytes and stop (or error) from either inflater."""
    isal_zlib = pytest.importorskip("isal.isal_zlib")
    monkeypatch.setattr(ts, "CHUNK_BYTES", 4096)  # many inflate calls: a damaged file has events before its damage
    data, events = _document(9, n=3000, indent=2)
    at = data.index(b"[", data.index(b'"traceEvents"')) + 1
    members = gzip.compress(data[:at]) + b"".join(gzip.compress(data[i : i + 50_000]) + b"\0" * (i % 3)
                                                  for i in range(at, len(data), 50_000))
    whole = gzip.compress(data)
    zeroed = bytearray(whole)  # inflates to garbage before the checksum can tell: an error naming its byte
    zeroed[len(zeroed) // 2 : len(zeroed) // 2 + 64] = bytes(64)
    bad_crc = bytearray(whole)  # every byte inflates, then the trailer's checksum fails
    bad_crc[-6] ^= 0xFF
    inputs = {"whole": whole, "members": members, "cut": whole[: len(whole) // 2], "zeroed": bytes(zeroed),
              "bad crc": bytes(bad_crc)}
    read = {}
    for module in (isal_zlib, zlib):
        _with_inflater(monkeypatch, module)
        for name, packed in inputs.items():
            try:
                got, state = _read_file(tmp_path / f"{name}.json.gz", packed)
            except TraceFormatError as exc:
                read[module.__name__, name] = str(exc)
                continue
            # the stop's reason up to the inflater's own words (zlib's and ISA-L's differ)
            read[module.__name__, name] = (_as_dicts(got), state.json_bytes, (state.truncated or "").split(" (")[0])
    for name in inputs:
        assert read["isal.isal_zlib", name] == read["zlib", name], name
    assert read["zlib", "whole"][0] == _expected(events) and read["zlib", "members"][1] == len(data)
    assert "invalid JSON" in read["zlib", "zeroed"]
    got, _, why = read["zlib", "bad crc"]
    assert why == "compressed stream ends early: corrupt gzip data" and got == _expected(events)[: len(got)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_complete_only_read_holds_the_same_complete_events_and_every_other_phase_alone(tmp_path, monkeypatch, seed):
    """Issue 43: ``complete_only`` (the readers that keep ``ph`` X alone) decodes the same windows into the same
    complete events, every other event into its ``ph`` alone (its other fields None, no ``args``); an event whose
    ``ph`` the union does not list (none, not a string, a phase of no format) decodes in full, as without."""
    monkeypatch.setattr(ts, "CHUNK_BYTES", 256)
    monkeypatch.setattr(ts, "_MIN_WINDOW", 16)
    data, _ = _document(seed, indent=2 if seed % 2 else None)
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(data))
    full_state, only_state = StreamState(), StreamState()
    full = list(ts.iter_trace_windows(path, full_state))
    only = list(ts.iter_trace_windows(path, only_state, complete_only=True))
    assert [len(w) for w in only] == [len(w) for w in full]
    assert only_state.n_events == full_state.n_events and only_state.header == full_state.header
    events, full_events = [e for w in only for e in w], [e for w in full for e in w]
    assert [e.ph for e in events] == [e.ph for e in full_events]
    complete = [e for e in events if e.ph == "X"]
    assert _as_dicts(complete) == _as_dicts([e for e in full_events if e.ph == "X"])
    assert [e.correlation() for e in complete] == [e.correlation() for e in full_events if e.ph == "X"]
    assert any(isinstance(e, ts.CompleteEvent) for e in complete)
    others = [e for e in events if e.ph != "X" and not isinstance(e, ts.TraceEvent)]
    assert others and all(e.cat is e.name is e.ts is e.tid is None and e.decoded_args() == {} for e in others)
    odd = [{"ph": "X", "ts": 1}, {"ts": 2}, {"ph": 5, "ts": 3}, {"ph": "Z", "ts": 4}, {"ph": "f", "ts": 5}]
    _read_file(tmp_path / "odd.json", json.dumps({"traceEvents": odd}).encode())
    got = list(ts.iter_trace_windows(tmp_path / "odd.json", StreamState(), complete_only=True))[0]
    assert [(e.ph, e.ts) for e in got] == [("X", 1), (None, 2), (None, 3), ("Z", 4), ("f", 5)]
