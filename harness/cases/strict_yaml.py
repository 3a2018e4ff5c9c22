"""The one YAML reader for case files and the taxonomy: plain data, and strict about it.

``yaml.safe_load`` lets the last of two equal keys win silently (a second ``labels:`` once turned a
positive case healthy), ends in a traceback on invalid UTF-8, in a ``RecursionError`` on deeply nested
input and in a ``MemoryError`` on aliases that expand exponentially. Here each of those is a :class:`YamlProblem` naming the file, the line where it can, and
what was expected.

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
    """Parse YAML bytes as plain data; raise :class:`YamlProblem` for bad UTF-8, bad YAML, duplicate keys
    or nesting too deep to read."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise YamlProblem(file, f"not UTF-8 at line {line} (byte {exc.start}): save the file as UTF-8") from None
    try:
        _check_depth(text)
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
    except MemoryError:  # e.g. aliases that expand exponentially
        raise YamlProblem(file, "too large to read in memory (a case is a few lines of plain data)") from None


def _check_depth(text: str) -> None:
    """Raise RecursionError (reported as "nested too deeply") when collections nest deeper than MAX_DEPTH."""
    depth = 0
    for event in yaml.parse(text, Loader=_BASE_LOADER):
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
