"""Stream the events of a Chrome/Kineto trace, without loading the whole document.

A Kineto trace is one JSON object (or, in the format's other form, which torch 1.8's Kineto wrote, a bare array of
events with no header): a few header keys (``schemaVersion``, ``distributedInfo``,
``baseTimeNanoseconds``, ...) and a ``traceEvents`` array that holds almost all of the bytes. Header
keys may come before or after the array (torch 2.13 writes ``baseTimeNanoseconds`` before it, older
Kineto after it), so the header is complete only once the stream ends.

How it reads (decided here, measured in ``benchmarks/trace_reader.py`` and ``benchmarks/big_trace.py``):

* The file is read as bytes, gunzipped when it starts with the gzip magic (whatever its name), in
  ``CHUNK_BYTES`` pieces; nothing but the current piece and the events decoded from it is held. Inflating goes
  through ISA-L's zlib-compatible inflater (``isal``, a dependency) when it is installed, else ``zlib``: the
  same bytes in 0.17 CPU s against 0.48 for the 453 MB repeated A100 trace's gzip (39 MB, level 1), about a tenth
  of what ``rules`` spends on that bundle (``benchmarks/trace_reader.py --real-shapes``).
* The ``traceEvents`` array is decoded a window (``WINDOW_BYTES``) at a time: the window is cut after the last ``}`` that
  is followed by ``,{`` or ``]`` and decoded as one array with msgspec into :class:`TraceEvent` structs
  that keep only the fields the readers use (``args`` stays raw bytes until asked for). A cut that fell
  inside a string or a nested object cannot decode (JSON is read left to right, so such a prefix never
  closes), and the window is then halved; windows that still fail, elements that are not objects and
  elements longer than a window are decoded one at a time by a bracket scanner. Chunks that msgspec
  rejects but Python's ``json`` accepts (``NaN``, ``Infinity``, numbers beyond float range) are decoded
  with ``json``, so the reader accepts exactly what ``json.load`` accepts.
* A file that ends early (a truncated or corrupt gzip member, JSON cut mid-array) is not an exception for
  the caller: the reader stops and records why in ``StreamState.truncated``, because a diagnoser must be
  able to say "this trace is incomplete". Malformed JSON that is not simply cut short, invalid UTF-8,
  nesting deeper than Python's recursion limit, a single value over ``MAX_VALUE_BYTES`` and running out
  of memory raise :class:`TraceFormatError` naming the file and the byte offset (of the decompressed
  JSON). A caller may cap the decompressed size (``max_json_bytes``): past it,
  :class:`TraceTooLargeError`.

Events are yielded one by one; they are small structs, but ``args`` refers to the decoded window, so
keep the values you need rather than the events themselves.

Size: one parser. The window decoder, its json fallback, the bracket scanner for odd elements and the
gzip source share one buffer and one byte offset for every error message; split across modules they
would have to pass that state around.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Union

import msgspec

from diageval.errors import DiagevalError

try:  # ISA-L's inflater (the ``isal`` dependency): zlib's interface and output, ~2.8x faster here; zlib without it
    from isal import isal_zlib as _inflate_module
except ImportError:  # pragma: no cover - isal is a dependency; a checkout without it still reads gzip
    _inflate_module = zlib  # type: ignore[assignment]
_INFLATE_ERRORS = (zlib.error, _inflate_module.error)

CHUNK_BYTES = 1 << 20
WINDOW_BYTES = 1 << 18
# The JSON one decode takes (at most; ``CHUNK_BYTES`` when smaller): its events (a few hundred bytes each as Python
# objects, ~3x the JSON) then stay near a core's L2 cache while the readers run over them several times, and the
# collectors' numpy calls per window (a few hundred, ~1 us each) are spread over enough events. On the 452 MB trace of
# benchmarks/trace_reader.py, summarize_trace took 14.3-14.9 CPU s with 128 kB windows against 16.6-21.9 with 1 MB
# ones (3 rounds each, load 3-4.5); 32 kB lost it again to the per-window overhead (17.4-19.6). Issue 43, once the
# readers worked on whole windows (numpy masks per window, not Python per event): rules on the 453 MB repeated A100
# trace took a median 3.31 CPU s with 256 kB windows against 3.64 with 128 kB (5 alternating rounds, load 4.3-4.6);
# its reader and collectors alone over the first 60 MB, 0.370 s against 0.401 (512 kB: 0.366; medians of 7).
_COMPRESSED_BLOCK = 1 << 18
# No Kineto event or header value comes near this (events are a few hundred bytes, deviceProperties a few
# kB); it bounds the memory one value can take, so a hostile file cannot grow the buffer without end.
MAX_VALUE_BYTES = 32 << 20
# A window cut that fails this close to its start is not halved again: one element is scanned instead.
_MIN_WINDOW = 4096
_WS = re.compile(rb"[ \t\n\r]*")
# After a candidate cut: the next element (another object) or the end of the array.
_BOUNDARY = re.compile(rb"[ \t\n\r]*(?:,[ \t\n\r]*\{|\])")
# Tokens that matter for finding where one value ends: complete strings, brackets, separators, and a
# lone quote (a string the buffer does not yet hold to its end).
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]|"')
_BYTE_IN_MSG = re.compile(r"\(byte (\d+)\)")


class TraceFormatError(DiagevalError, ValueError):
    """The trace file is not a Chrome trace JSON object (says which file and where)."""


class TraceTooLargeError(TraceFormatError):
    """The trace decompresses to more JSON than the caller allowed."""

    def __init__(self, message: str, limit: int):
        super().__init__(message)
        self.limit = limit


class TraceEvent(msgspec.Struct, gc=False):
    """One element of ``traceEvents``: the Chrome trace fields the readers use, as written in the file.

    ``ph``, ``cat`` and ``name`` are strings, or None when absent or not a string (so that every reader can
    look them up in sets without a type check); the other values are as written (``ts`` may be an int or
    a float, ``tid`` an int or a string), None when absent; fields not listed here are skipped while decoding (add one here if a reader
    needs it: ``id``, which no reader uses, was dropped with ``pid``, 8% of the decode's CPU on the A100 trace; ``pid`` came
    back for :mod:`~diageval.bundle.trace_defects`, which tells merged ranks apart by it). ``args`` holds the raw JSON of the event's ``args`` (empty when absent): decode it with
    :meth:`decoded_args` only for the few events whose arguments matter. That raw JSON is a view into
    the decoded window (about ``CHUNK_BYTES``), so an event kept alive keeps its window alive: keep the
    values you need (tuples, arrays), not the events.
    """

    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: msgspec.Raw = msgspec.Raw()

    def decoded_args(self) -> dict[str, Any]:
        """``args`` as a dict ({} when the event has none, or when they are not a JSON object)."""
        if not self.args:
            return {}
        try:
            value = _GENERIC.decode(self.args)
        except (msgspec.DecodeError, RecursionError):
            try:
                value = json.loads(bytes(self.args))
            except (ValueError, RecursionError):
                return {}
        return value if isinstance(value, dict) else {}

    def correlation(self) -> Any:
        """``decoded_args().get("correlation")``, decoding no other argument (the runtime call <-> device
        event join reads it on every kernel and launch; the whole ``args`` dict cost most of that read)."""
        if not self.args:
            return None
        try:
            return _CORRELATION.decode(self.args).correlation
        except (msgspec.DecodeError, RecursionError):  # not an object, a number beyond range...: as decoded_args
            return self.decoded_args().get("correlation")


_EVENT_FIELDS = TraceEvent.__struct_fields__[:-1]


CompleteEvent = msgspec.defstruct(
    "CompleteEvent", [(f.name, f.type, f.default) for f in msgspec.structs.fields(TraceEvent) if f.name != "ph"],
    tag_field="ph", tag="X", gc=False, module=__name__,
    namespace={"ph": "X", "decoded_args": TraceEvent.decoded_args, "correlation": TraceEvent.correlation,
               "__doc__": "A :class:`TraceEvent` whose ``ph`` is ``X`` (a complete event), as a ``complete_only`` read "
                          "decodes it: the same fields, values and methods; ``ph`` is its tag (always ``\"X\"``)."})


# Every phase of the Chrome trace format (the deprecated S/T/p/F included) but X: a ``complete_only`` read decodes an
# event of one of these into a struct that holds only its ``ph``, skipping its other fields inside msgspec (a Kineto
# trace's flow events, ph s/f, are a third of its events: 25% of the decode's CPU on the A100 trace's windows)
_OTHER_PHASES = "BEiICbnestfPNODMVvRc()STpF"
_SKIPPED = tuple(msgspec.defstruct(f"_Phase{i}", [], tag_field="ph", tag=ph, gc=False,
                                   namespace={**dict.fromkeys(_EVENT_FIELDS), "ph": ph, "args": msgspec.Raw(),
                                              "decoded_args": TraceEvent.decoded_args,
                                              "correlation": TraceEvent.correlation})
                 for i, ph in enumerate(_OTHER_PHASES))
_COMPLETE_EVENTS = msgspec.json.Decoder(list[Union[(CompleteEvent, *_SKIPPED)]])  # type: ignore[misc]


class _Correlation(msgspec.Struct, gc=False):
    correlation: Any = None


_CORRELATION = msgspec.json.Decoder(_Correlation)
_CORRELATIONS = msgspec.json.Decoder(list[_Correlation])


def correlations(events: list[TraceEvent]) -> list[Any]:
    """``[ev.correlation() for ev in events]``, decoded in one call for the whole list (a window's kernels and
    launches); events whose ``args`` one decode cannot take (not an object...) fall back to one at a time."""
    if not events:
        return []
    try:
        decoded = _CORRELATIONS.decode(b"[" + b",".join([ev.args or b"{}" for ev in events]) + b"]")
    except (msgspec.DecodeError, RecursionError):
        return [ev.correlation() for ev in events]
    return [c.correlation for c in decoded]
_EVENTS = msgspec.json.Decoder(list[TraceEvent])
_GENERIC = msgspec.json.Decoder()
_STRING_FIELDS = [_EVENT_FIELDS.index(k) for k in ("ph", "cat", "name")]


def event_from_dict(obj: dict[str, Any]) -> TraceEvent:
    """A :class:`TraceEvent` from an already decoded JSON object (tests, and chunks ``json`` decoded)."""
    args = msgspec.Raw(json.dumps(obj["args"]).encode()) if "args" in obj else msgspec.Raw()
    values = [obj.get(k) for k in _EVENT_FIELDS]
    for i in _STRING_FIELDS:
        if not isinstance(values[i], str):
            values[i] = None
    return TraceEvent(*values, args=args)


@dataclass
class StreamState:
    """What the stream learned besides the events; filled as the stream is consumed."""

    header: dict[str, Any] = field(default_factory=dict)  # every top-level key but traceEvents
    json_bytes: int = 0  # decompressed bytes read so far
    file_bytes: int = 0  # bytes of the file read so far (compressed ones for a .gz): with its size, how far along
    n_events: int = 0  # objects yielded from traceEvents
    truncated: str | None = None  # why the input ended early; None when it did not
    has_trace_events: bool = False  # a traceEvents array was found


class _Source:
    """Decompressed bytes of a trace file, counted against an optional limit.

    gzip is inflated here rather than through ``gzip.open``: ``GzipFile.read`` raises at a cut member and
    drops what it had inflated in that call, and we want every byte up to the cut.
    """

    def __init__(self, path: Path, state: StreamState, max_json_bytes: int | None):
        self.path = path
        self.state = state
        self.max_json_bytes = max_json_bytes
        self.file: BinaryIO = open(path, "rb")
        self.gzipped = self.file.peek(2)[:2] == b"\x1f\x8b"  # type: ignore[attr-defined]
        self.inflater = _inflate_module.decompressobj(wbits=31)
        self.pending = b""  # compressed bytes read but not yet inflated
        self.done = False

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes; b"" at the end, or when the compressed stream is cut or corrupt (then
        ``state.truncated`` says so)."""
        data = self._inflate(n) if self.gzipped else self.file.read(n)
        self.state.json_bytes += len(data)
        self.state.file_bytes = self.file.tell()
        if self.max_json_bytes is not None and self.state.json_bytes > self.max_json_bytes:
            raise TraceTooLargeError(
                f"{self.path}: decompresses to more than {self.max_json_bytes} bytes of JSON "
                f"(the limit for one trace file)",
                self.max_json_bytes,
            )
        return data

    def _inflate(self, n: int) -> bytes:
        parts: list[bytes] = []
        got = 0
        while got < n and not self.done:
            if self.inflater.eof:  # a member ended: another may follow (zero padding is allowed between)
                # unused_data holds all input after the member (unconsumed_tail may repeat part of it)
                self.pending = self.inflater.unused_data.lstrip(b"\0")
                if not self.pending:
                    block = self.file.read(_COMPRESSED_BLOCK)
                    self.done = not block
                    self.pending = block.lstrip(b"\0")
                    continue
                self.inflater = _inflate_module.decompressobj(wbits=31)
            if not self.pending:
                self.pending = self.file.read(_COMPRESSED_BLOCK)
            if not self.pending:  # the file ends inside a member: first what the inflater holds of the input it took
                # (ISA-L takes input past the bounded output and holds its inflated bytes; zlib leaves it in
                # unconsumed_tail), then the stop
                try:
                    out = self.inflater.decompress(b"", n - got)
                except _INFLATE_ERRORS:
                    out = b""
                if out:
                    parts.append(out)
                    got += len(out)
                    continue
                self.state.truncated = "compressed stream ends early: the last gzip member is cut short"
                self.done = True
                break
            try:
                out = self.inflater.decompress(self.pending, n - got)  # bounded output: bombs stay small
            except _INFLATE_ERRORS as exc:
                self.state.truncated = f"compressed stream ends early: corrupt gzip data ({exc})"
                self.done = True
                break
            self.pending = self.inflater.unconsumed_tail
            if out:
                parts.append(out)
                got += len(out)
        return b"".join(parts)

    def close(self) -> None:
        self.file.close()


class _Buffer:
    """A sliding byte window over the decompressed stream; ``base`` is the offset of ``buf[0]``."""

    def __init__(self, source: _Source, path: Path, complete_only: bool = False):
        self.source = source
        self.path = path
        self.complete_only = complete_only  # decode non-X events into their phase alone (``iter_trace_windows``)
        self.buf = b""
        self.pos = 0
        self.base = 0
        self.eof = False

    def offset(self, index: int | None = None) -> int:
        return self.base + (self.pos if index is None else index)

    def more(self, at_least: int = 0) -> bool:
        """Append at least ``max(at_least, CHUNK_BYTES)`` bytes (less at the end); False when nothing came."""
        if self.eof:
            return False
        want = max(at_least, CHUNK_BYTES)
        parts = []
        got = 0
        while got < want:
            data = self.source.read(want - got)
            if not data:
                self.eof = True
                break
            parts.append(data)
            got += len(data)
        if not got:
            return False
        self.base += self.pos
        self.buf = b"".join([memoryview(self.buf)[self.pos :], *parts])  # one copy
        self.pos = 0
        return True

    def skip_ws(self) -> int | None:
        """Skip whitespace; the next byte, or None at the end of input."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return None

    def error(self, what: str, index: int | None = None) -> TraceFormatError:
        return TraceFormatError(f"{self.path}: {what} at byte {self.offset(index)}")

    def expect(self, chars: bytes) -> int | None:
        """Consume one of ``chars`` (after whitespace) and return it; None at the end of input."""
        c = self.skip_ws()
        if c is None:
            return None
        if c not in chars:
            found = chr(c) if 32 <= c < 127 else f"byte 0x{c:02x}"
            raise self.error(f"invalid JSON: expected one of {chars.decode()!r}, found {found!r}")
        self.pos += 1
        return c

    def value(self) -> tuple[bool, Any]:
        """Decode the one JSON value at the cursor: (True, value), or (False, None) if the input ends inside it."""
        if self.skip_ws() is None:
            return False, None
        while True:
            end = _value_end(self.buf, self.pos)
            if end is not None:
                break
            if len(self.buf) - self.pos > MAX_VALUE_BYTES:
                raise self.error(
                    f"a JSON value longer than {MAX_VALUE_BYTES} bytes (expected trace events of a few kB)"
                )
            if not self.more(len(self.buf) - self.pos):  # double the window: the rescans stay linear
                return False, None
        data = self.buf[self.pos : end]
        value = _decode_json(data, self, self.pos)
        self.pos = end
        return True, value

    def event_window(self) -> list[TraceEvent] | None:
        """Decode as many whole elements as a window holds, cursor on the first; None when the window
        has no cut that decodes (the caller then reads one element with :meth:`value`)."""
        window = min(CHUNK_BYTES, WINDOW_BYTES)
        if len(self.buf) - self.pos < window:
            self.more()
        limit = min(len(self.buf), self.pos + window)
        while limit - self.pos >= _MIN_WINDOW or limit == len(self.buf):
            cut = _last_cut(self.buf, self.pos, limit)
            if cut is None:
                return None
            data = b"".join((b"[", memoryview(self.buf)[self.pos : cut + 1], b"]"))
            decoded = _decode_events(data, self, self.pos - 1)
            if decoded is not None:
                events, taken = decoded
                # all of the window taken: the cursor goes after the cut; else onto the array's own ']'
                self.pos = cut + 1 if taken == len(data) else self.pos - 1 + taken - 1
                return events
            limit = self.pos + (cut - self.pos) // 2  # the cut fell inside an element: try an earlier one
        return None


def _last_cut(buf: bytes, start: int, limit: int) -> int | None:
    """Index of the last ``}`` in ``buf[start:limit]`` followed by ``,{`` or ``]``."""
    p = buf.rfind(b"}", start, limit)
    while p >= 0:
        if _BOUNDARY.match(buf, p + 1):
            return p
        p = buf.rfind(b"}", start, p)
    return None


def _value_end(buf: bytes, pos: int) -> int | None:
    """End index of the JSON value starting at ``buf[pos]``; None when ``buf`` ends before it does.

    Only brackets outside strings are counted: the value itself is decoded (and checked) afterwards.
    A scalar ends at the next separator or closing bracket, so a number is never cut at the buffer edge.
    """
    depth = 0
    for m in _TOKEN.finditer(buf, pos):
        c = buf[m.start()]
        if c == 0x22:  # '"'
            if m.end() - m.start() == 1:
                return None  # a string the buffer holds only the start of
            if depth == 0:
                return m.end()
        elif c in b"[{":
            depth += 1
        elif c in b"]}":
            if depth == 0:
                return m.start()
            depth -= 1
            if depth == 0:
                return m.end()
        elif depth == 0:  # ',' or ':'
            return m.start()
    return None


def _check_utf8(data: bytes, buffer: _Buffer, index: int) -> None:
    """msgspec does not look inside values it keeps raw (``args``): check the window's UTF-8 here."""
    if data.isascii():
        return
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise buffer.error(f"not UTF-8 ({exc.reason})", index + exc.start) from None


def _byte_index(data: bytes, char_index: int) -> int:
    """``json`` reports positions in characters of the decoded text; the offsets we print are bytes."""
    return char_index if data.isascii() else len(data.decode("utf-8")[:char_index].encode("utf-8"))


def _decode_json(data: bytes, buffer: _Buffer, index: int) -> Any:
    """One JSON value (header values, odd elements) with ``json``'s acceptance; errors name file and byte."""
    try:
        return _GENERIC.decode(data)
    except (msgspec.DecodeError, RecursionError):
        pass
    try:
        return json.loads(data)
    except UnicodeDecodeError as exc:
        raise buffer.error(f"not UTF-8 ({exc.reason})", index + exc.start) from None
    except json.JSONDecodeError as exc:
        raise buffer.error(f"invalid JSON: {exc.msg}", index + _byte_index(data, exc.pos)) from None
    except RecursionError:
        raise buffer.error("JSON nested deeper than Python's recursion limit", index) from None


def _decode_events(data: bytes, buffer: _Buffer, index: int) -> tuple[list[TraceEvent], int] | None:
    """Decode ``data``, ``[`` + a window + ``]``, where ``index`` is the buffer index ``data[0]`` stands for.

    Returns the events and how many bytes of ``data`` they took (less than all when the array ends inside
    the window: then the last byte taken is the array's own ``]``); None when the window's end was not an
    element boundary (the error is at the closing ``]``).
    """
    try:
        events = _typed(data, buffer.complete_only)
        _check_utf8(data, buffer, index)
        return events, len(data)
    except msgspec.ValidationError:
        pass  # an element that is not an object, a ph/cat/name that is not a string, a number beyond float range
    except msgspec.DecodeError as exc:
        message = str(exc)
        m = _BYTE_IN_MSG.search(message)
        if message.startswith("Input data was truncated") or (m and int(m.group(1)) >= len(data) - 1):
            return None
        if "trailing characters" in message and m:  # the array ended inside the window
            end = data.rfind(b"]", 0, int(m.group(1))) + 1
            if end > 0:
                return _decode_events(data[:end], buffer, index)
    except RecursionError:
        pass  # json reports the same, with a position
    _check_utf8(data, buffer, index)
    try:
        items = json.loads(data)
    except json.JSONDecodeError:
        # a cut that fell inside a string reads the rest with strings and text swapped, and can fail anywhere before
        # the end: the window is narrowed, and an element that is malformed is found by the element scanner, which
        # names its byte
        return None
    except RecursionError:
        raise buffer.error("JSON nested deeper than Python's recursion limit", index + 1) from None
    return [event_from_dict(e) for e in items if isinstance(e, dict)], len(data)


def _typed(data: bytes, complete_only: bool) -> list[Any]:
    """``data`` decoded into :class:`TraceEvent` structs; with ``complete_only``, its complete events into
    :class:`CompleteEvent` and the others into their phase alone, where every event's ``ph`` is a string msgspec's
    union lists (else, as without: an event with no ``ph``, or another, decodes in full)."""
    if complete_only:
        try:
            return _COMPLETE_EVENTS.decode(data)
        except msgspec.ValidationError:
            pass
    return _EVENTS.decode(data)


def iter_trace_events(path: Path, state: StreamState, *, max_json_bytes: int | None = None) -> Iterator[TraceEvent]:
    """Yield each object of ``traceEvents`` in file order; header keys go to ``state.header``.

    The caller reads ``state`` after exhausting the iterator (the header may end after the events).
    Elements of ``traceEvents`` that are not JSON objects are skipped (not counted in ``n_events``).
    """
    for events in iter_trace_windows(path, state, max_json_bytes=max_json_bytes):
        yield from events


def iter_trace_windows(path: Path, state: StreamState, *, max_json_bytes: int | None = None,
                       complete_only: bool = False) -> Iterator[list[TraceEvent]]:
    """The same events as :func:`iter_trace_events`, in file order, a window (a list) at a time.

    A window is what one decode produced (about ``CHUNK_BYTES`` of JSON, or one odd element; never empty):
    a caller that works on whole windows (list comprehensions, one filter per window) spends far less
    Python per event than one that takes events one by one.

    ``complete_only``: for a caller that reads complete events (``ph`` X) alone (``trace_stats.timed_window``'s): the
    windows, counts and errors are the same, the complete events too (as :class:`CompleteEvent`, ``ph`` "X"), but
    every other event holds its ``ph`` alone (its other fields are None and an empty ``args``, skipped by msgspec).
    """
    path = Path(path)
    source = _Source(path, state, max_json_bytes)
    b = _Buffer(source, path, complete_only)
    try:
        for events in _read_document(b, state):
            if events:
                yield events
    except RecursionError:
        raise b.error("JSON nested deeper than Python's recursion limit") from None
    except MemoryError:
        raise b.error("ran out of memory while reading the trace") from None
    finally:
        source.close()


def _read_document(b: _Buffer, state: StreamState) -> Iterator[list[TraceEvent]]:
    c = b.skip_ws()
    if c is None:
        state.truncated = state.truncated or "empty file"
        return
    if c == ord("["):  # the Chrome trace format's other form, a bare array of events (torch 1.8's Kineto wrote it)
        start = b.offset()
        b.pos += 1
        if b.skip_ws() not in (ord("{"), ord("]"), None):  # [1, 2] is some other JSON, not a trace
            raise TraceFormatError(f"{b.path}: not a Chrome trace: expected a JSON object with a 'traceEvents' array, "
                                   f"or an array of event objects, at byte {start}")
        state.has_trace_events = True
        complete = yield from _read_events(b, state)
        if not complete:
            state.truncated = state.truncated or "file ends inside the array of events"
        return
    if c != ord("{"):
        raise b.error(f"not a Chrome trace: expected a JSON object with a 'traceEvents' array, found {chr(c)!r}")
    b.pos += 1
    if b.skip_ws() == ord("}"):
        return
    while True:
        ok, key = b.value()
        if not ok:
            state.truncated = state.truncated or "file ends inside a header key"
            return
        if not isinstance(key, str):
            raise b.error(f"invalid JSON: expected a key string, found {key!r}")
        if b.expect(b":") is None:
            state.truncated = state.truncated or "file ends inside a header key"
            return
        if key == "traceEvents":
            c = b.skip_ws()
            if c is None:
                state.truncated = state.truncated or "file ends before traceEvents"
                return
            if c != ord("["):
                raise b.error("not a Chrome trace: 'traceEvents' is not an array")
            b.pos += 1
            state.has_trace_events = True
            complete = yield from _read_events(b, state)
            if not complete:
                state.truncated = state.truncated or "file ends inside traceEvents"
                return
        else:
            ok, val = b.value()
            if not ok:
                state.truncated = state.truncated or f"file ends inside header field {key!r}"
                return
            state.header[key] = val
        c = b.expect(b",}")
        if c is None:
            state.truncated = state.truncated or "file ends inside the top-level object"
            return
        if c == ord("}"):
            return


def _read_events(b: _Buffer, state: StreamState) -> Iterator[list[TraceEvent]]:
    """The elements of the array whose ``[`` was just consumed; returns False when the input ends first."""
    c = b.skip_ws()
    if c is None:
        return False
    if c == ord("]"):
        b.pos += 1
        return True
    while True:
        events = b.event_window() if c == ord("{") else None
        if events is None:
            ok, value = b.value()
            if not ok:
                return False
            events = [event_from_dict(value)] if isinstance(value, dict) else []
        state.n_events += len(events)
        yield events
        c = b.expect(b",]")
        if c is None:
            return False
        if c == ord("]"):
            return True
        c = b.skip_ws()
        if c is None:
            return False


__all__ = [
    "CHUNK_BYTES",
    "WINDOW_BYTES",
    "MAX_VALUE_BYTES",
    "CompleteEvent",
    "StreamState",
    "TraceEvent",
    "TraceFormatError",
    "TraceTooLargeError",
    "correlations",
    "event_from_dict",
    "iter_trace_events",
    "iter_trace_windows",
]
