"""Untrusted text made inert where a person reads it: a terminal line, the markdown board, the HTML page.

A diagnoser's name, version, claim summaries and evidence, its abstain reason and its error text are its
own words: a third party's, or a model's. Printed raw they act on the reader: an ESC or C1 sequence
retitles the window, writes the clipboard (OSC 52), moves the cursor or hides lines; a Unicode bidi
override or isolate reorders what a line seems to say; in markdown a name like ``<img src=x
onerror=...>`` is HTML a renderer may run. Every such character is written as its code point, visibly.

* :func:`inert`: C0 controls (all but newline and tab; with ``newlines=False`` those too), DEL, the C1
  controls, the bidi embeddings, overrides, isolates and marks, the Unicode line and paragraph
  separators and lone surrogates become ``\\uXXXX``. That is a JSON escape too, so inerting JSON text (``diagnose --json``)
  keeps it valid JSON that decodes to the same strings (such characters only occur inside strings).
* :func:`markdown_inert`: :func:`inert` on one line, then every character markdown or inline HTML gives
  a meaning to is backslash-escaped (CommonMark escapes any ASCII punctuation), so a name is text in a
  table cell, never markup, a link, an image or a cell boundary.
* :func:`clipped`: a text cut to a bound, saying how much was left out and where the whole of it is.
"""

from __future__ import annotations

import re

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_SEPARATORS = "\u2028\u2029"
_SURROGATES = "\ud800-\udfff"  # a lone one (a JSON "\\ud800" Python decodes) cannot even be encoded for a terminal
_UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}{_SEPARATORS}{_SURROGATES}]")
_UNSAFE_ONE_LINE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}{_SEPARATORS}{_SURROGATES}]")
_MARKDOWN = re.compile(r"([\\`*_{}\[\]<>()#+!|~&$])")


def _code(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def inert(text: object, *, newlines: bool = True) -> str:
    """``text`` with every control, bidi and separator character written as ``\\uXXXX``; newline and
    tab kept unless ``newlines`` is False (one line: a table cell, a name)."""
    return (_UNSAFE if newlines else _UNSAFE_ONE_LINE).sub(_code, str(text))


def markdown_inert(text: object) -> str:
    """``text`` as one line of markdown text: :func:`inert` without newlines, markdown and HTML escaped."""
    return _MARKDOWN.sub(r"\\\1", inert(text, newlines=False))


def clipped(text: str, limit: int, where: str) -> str:
    """``text`` cut to ``limit`` characters, with a note of how many more there are and ``where`` they are."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters in {where})"
