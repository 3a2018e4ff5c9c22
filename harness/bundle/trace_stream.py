"""Stream the events of a Chrome/Kineto trace one by one, without loading the whole document.

A Kineto trace is one JSON object: a few header keys (``schemaVersion``, ``distributedInfo``,
``baseTimeNanoseconds``, ...) and a ``traceEvents`` array that holds almost all of the bytes. Header
keys may come before or after the array (torch 2.13 writes ``baseTimeNanoseconds`` before it, older
Kineto after it), so the header is complete only once the stream ends.

Decided here: the text is decoded in 1 MiB chunks with the standard library's C scanner
(``JSONDecoder.raw_decode``), one array element at a time, so memory stays bounded by the largest
single event and the speed is close to ``json.load``. A file that ends early (a truncated gzip member
or JSON cut mid-array) is not an exception for the caller: the reader stops and records why in
``StreamState.truncated``, because a diagnoser must be able to say "this trace is incomplete".
Malformed JSON that is not simply cut short raises ``TraceFormatError`` with the file and offset.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

CHUNK_CHARS = 1 << 20
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class TraceFormatError(ValueError):
    """The trace file is not a Chrome trace JSON object (says which file and where)."""


@dataclass
class StreamState:
    """What the stream learned besides the events; filled as the stream is consumed."""

    header: dict[str, Any] = field(default_factory=dict)
    json_chars: int = 0
    n_events: int = 0
    truncated: str | None = None


class _Buffer:
    """A sliding text window over a decompressed stream."""

    def __init__(self, text: io.TextIOBase, path: Path, state: StreamState):
        self.text = text
        self.path = path
        self.state = state
        self.buf = ""
        self.pos = 0
        self.eof = False

    def more(self) -> bool:
        """Append the next chunk; False at end of input (or when the compressed stream is cut)."""
        if self.eof:
            return False
        try:
            chunk = self.text.read(CHUNK_CHARS)
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError, UnicodeDecodeError) as exc:
            self.eof = True
            self.state.truncated = f"compressed stream ends early: {exc}"
            return False
        if not chunk:
            self.eof = True
            return False
        self.state.json_chars += len(chunk)
        if self.pos > CHUNK_CHARS:
            self.buf = self.buf[self.pos :]
            self.pos = 0
        self.buf += chunk
        return True

    def skip_ws(self) -> str | None:
        """Skip whitespace; the next character, or None at end of input."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return None

    def expect(self, chars: str) -> str | None:
        c = self.skip_ws()
        if c is None:
            return None
        if c not in chars:
            raise TraceFormatError(
                f"{self.path}: expected one of {chars!r} at character {self.state.json_chars - len(self.buf) + self.pos},"
                f" found {c!r}"
            )
        self.pos += 1
        return c

    def value(self) -> tuple[bool, Any]:
        """Decode one JSON value at the cursor: (True, value), or (False, None) if the input ends inside it."""
        if self.skip_ws() is None:
            return False, None
        while True:
            try:
                obj, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                cut_short = exc.pos >= len(self.buf) - 65536 or exc.msg.startswith("Unterminated")
                if cut_short and self.more():
                    continue
                if cut_short and (self.eof or self.state.truncated):
                    return False, None
                raise TraceFormatError(f"{self.path}: invalid JSON near character {exc.pos}: {exc.msg}") from exc
            if end == len(self.buf) and self.more():
                continue  # a number cut at the chunk edge would decode as a prefix of itself
            self.pos = end
            return True, obj


def _open_text(path: Path) -> io.TextIOBase:
    """Text of a trace, gunzipped when the file starts with the gzip magic (whatever its name)."""
    with open(path, "rb") as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    raw: BinaryIO = gzip.open(path, "rb") if gzipped else open(path, "rb")  # type: ignore[assignment]
    return io.TextIOWrapper(raw, encoding="utf-8", errors="strict")


def iter_trace_events(path: Path, state: StreamState) -> Iterator[dict[str, Any]]:
    """Yield each element of ``traceEvents`` in file order; header keys go to ``state.header``.

    The caller reads ``state`` after exhausting the iterator (the header may end after the events).
    """
    path = Path(path)
    with _open_text(path) as text:
        b = _Buffer(text, path, state)
        if b.expect("{") is None:
            state.truncated = "empty file"
            return
        while True:
            c = b.expect(",}\"")
            if c is None:
                state.truncated = state.truncated or "file ends inside the top-level object"
                return
            if c == "}":
                return
            if c == ",":
                continue
            b.pos -= 1
            ok, key = b.value()
            if not ok or b.expect(":") is None:
                state.truncated = state.truncated or "file ends inside a header key"
                return
            if key != "traceEvents":
                ok, val = b.value()
                if not ok:
                    state.truncated = state.truncated or f"file ends inside header field {key!r}"
                    return
                state.header[key] = val
                continue
            if b.expect("[") is None:
                state.truncated = state.truncated or "file ends before traceEvents"
                return
            if b.skip_ws() == "]":
                b.pos += 1
                continue
            while True:
                ok, ev = b.value()
                if not ok:
                    state.truncated = state.truncated or "file ends inside traceEvents"
                    return
                if isinstance(ev, dict):
                    state.n_events += 1
                    yield ev
                c = b.expect(",]")
                if c is None:
                    state.truncated = state.truncated or "file ends inside traceEvents"
                    return
                if c == "]":
                    break
