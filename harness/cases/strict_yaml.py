"""The one YAML reader for case files and the taxonomy: plain data, and strict about it.

``yaml.safe_load`` lets the last of two equal keys win silently (a second ``labels:`` once turned a
positive case healthy), ends in a traceback on invalid UTF-8, in a ``RecursionError`` on deeply nested
input, and builds whatever aliases point at: a 400-byte file of nine anchors, each a list of nine aliases
of the one before ("billion laughs"), composes to a small graph but is 9^9 values to anything that walks
it (the case model, an error message quoting the value): ``diageval cases validate`` held 1.3 GB past 45 s.
Here each of those is a :class:`YamlProblem` naming the file, the line where it can, and what was expected.

Anchors and aliases (``&name``, ``*name``) are refused outright, not bounded: a case is a few lines of plain
data, no case file of the corpus uses them, and a value written out is what a reviewer reads. The refusal
comes from the same pass over the parser's events that counts the depth, before anything is composed.

libyaml's C parser reads the corpus ~10x faster than PyYAML's pure-Python one (1.4 s of every ``diageval``
process went to the case files), where PyYAML was built with it; its composer recurses in C, though, and a
file nested 100,000 deep crashes the process (a segmentation fault, not a ``RecursionError``). So the depth is
counted first on the parser's events (a loop, no recursion) and a file deeper than :data:`MAX_DEPTH` is refused
before it is composed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from diageval.errors import DiagevalError


class YamlProblem(DiagevalError, ValueError):
    """A YAML file that cannot be read as plain data; ``str()`` is one line naming file and place."""

    def __init__(self, file: str, message: str):
        super().__init__(f"{file}: {message}")
        self.file = file
        self.message = message


MAX_DEPTH = 100
"""Nesting deeper than this is refused (a case file is a few levels of plain data)."""
NESTED_TOO_DEEPLY = "nested too deeply to read (a case is a few levels of plain data)"
NO_ALIASES = ("YAML anchors and aliases (&name, *name) are not allowed in a case file (a case is plain data): "
              "write the value out")
_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # CSafeLoader exists where PyYAML has libyaml


class _StrictLoader(_BASE_LOADER):  # type: ignore[misc,valid-type]
    """``SafeLoader`` (libyaml's where available) that refuses a mapping with the same key twice."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:  # the keys written here; keys merged in with ``<<`` may be overridden
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
        except TypeError:  # an unhashable key: the constructor below says so properly
            continue
        if duplicate:
            first = seen[key].start_mark.line + 1
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first at line {first}; a key may appear once)", key_node.start_mark
            )
        seen[key] = key_node
    return yaml.constructor.SafeConstructor.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(data: bytes, file: str) -> Any:
    """Parse YAML bytes as plain data; raise :class:`YamlProblem` for bad UTF-8, bad YAML, duplicate keys,
    an anchor or alias, or nesting too deep to read."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise YamlProblem(file, f"not UTF-8 at line {line} (byte {exc.start}): save the file as UTF-8") from None
    try:
        _check_events(text, file)
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        if "nesting depth" in str(getattr(exc, "problem", "")):  # libyaml >= 0.2.5 stops at 1000 levels itself
            raise YamlProblem(file, NESTED_TOO_DEEPLY) from None
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise YamlProblem(file, f"not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise YamlProblem(file, NESTED_TOO_DEEPLY) from None
    except MemoryError:  # a file too big for memory (aliases, which could expand, are refused above)
        raise YamlProblem(file, "too large to read in memory (a case is a few lines of plain data)") from None


def _check_events(text: str, file: str) -> None:
    """Raise :class:`YamlProblem` at the first anchor or alias, and RecursionError (reported as "nested too
    deeply") when collections nest deeper than MAX_DEPTH: on the parser's events, one by one, so nothing is
    composed or built and the cost is linear in the file's bytes."""
    depth = 0
    for event in yaml.parse(text, Loader=_BASE_LOADER):
        if isinstance(event, yaml.NodeEvent) and event.anchor is not None:  # `&name` on a node, or `*name`
            mark = event.start_mark
            sign = "*" if isinstance(event, yaml.AliasEvent) else "&"
            raise YamlProblem(file, f"line {mark.line + 1}, column {mark.column + 1}: {sign}{event.anchor}: {NO_ALIASES}")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise RecursionError(f"nested deeper than {MAX_DEPTH}")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def read_yaml(path: Path) -> Any:
    """:func:`parse_yaml` of a file; an unreadable file is a :class:`YamlProblem` too."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise YamlProblem(str(path), f"cannot read: {exc.strerror or exc}") from None
    return parse_yaml(data, str(path))
