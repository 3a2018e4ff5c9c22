"""What a ``--diagnoser`` spec needs to see inside its box, found without importing or running anything.

* ``module:attr``: the top-level module's file or package folder, located with ``PathFinder`` (which reads
  the file system and executes nothing), is shown read-only and its folder put on ``PYTHONPATH``.
  Modules of installed distributions are visible anyway (the Python installation is); ``diageval``'s
  own modules too.
* ``cmd:``: every word of the command that names an existing file or folder (relative words are taken
  from the current directory and rewritten as absolute paths, because the program's working directory
  is its case folder) is shown read-only.

A path inside the cache, the run folders or the cases folder is refused, and inside the checkout only a
single named file is shown (:meth:`~diageval.run.sandbox.HiddenRoots.may_show`): a diagnoser that lives
there cannot run sandboxed, and the error says what to do.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from importlib.machinery import PathFinder
from pathlib import Path

from diageval.run.box_policy import HiddenRoots


class SpecPathError(Exception):
    """A diagnoser spec that needs a path its box may not show."""


@dataclass(frozen=True)
class SpecPaths:
    spec: str  # the spec to run (a cmd: spec with its relative paths made absolute)
    visible: tuple[Path, ...] = ()
    python_path: tuple[str, ...] = ()


def spec_paths(spec: str, roots: HiddenRoots, *, cwd: Path | None = None) -> SpecPaths:
    spec = spec.strip()
    if spec.startswith("cmd:"):
        return _command_paths(spec, roots, Path(cwd or Path.cwd()))
    if ":" in spec:
        return _module_paths(spec, roots, Path(cwd or Path.cwd()))
    return SpecPaths(spec)


def _module_paths(spec: str, roots: HiddenRoots, cwd: Path) -> SpecPaths:
    top = spec.partition(":")[0].split(".")[0]
    if top == "diageval":
        return SpecPaths(spec)
    search = [p for p in sys.path if p] + [str(cwd)]
    found = PathFinder.find_spec(top, search)
    if found is None:
        return SpecPaths(spec)  # the worker reports "cannot import" in the registry's words
    if found.submodule_search_locations:
        location = Path(list(found.submodule_search_locations)[0])
    elif found.origin:
        location = Path(found.origin)
    else:
        return SpecPaths(spec)
    shown = roots.may_show(location)
    if shown is None or (location.is_dir() and shown != location.resolve()):
        raise SpecPathError(
            f"{spec!r}: module {top!r} is at {location}, inside the checkout, the cache, the runs or the cases, which "
            "a sandboxed diagnoser may not see; install it as a package or move it elsewhere"
        )
    return SpecPaths(spec, visible=(shown,), python_path=(str(location.parent),))


def _command_paths(spec: str, roots: HiddenRoots, cwd: Path) -> SpecPaths:
    command = spec[len("cmd:"):].strip()
    try:
        words = shlex.split(command)
    except ValueError:
        return SpecPaths(spec)  # the registry reports the parse error
    visible: list[Path] = []
    rewritten = command
    for word in dict.fromkeys(words):
        if "{" in word or word.startswith("-"):
            continue
        path = Path(word) if Path(word).is_absolute() else cwd / word
        if not path.exists() or str(path.resolve()) in ("/", str(cwd.resolve())):
            continue
        shown = roots.may_show(path)
        if shown is None:
            raise SpecPathError(
                f"{spec!r}: {word} is inside the checkout, the cache, the runs or the cases, which a sandboxed "
                "diagnoser may not see; move the program elsewhere or install it"
            )
        visible.append(shown)
        if not Path(word).is_absolute() and ("/" in word or path.is_file()):
            rewritten = _replace_word(rewritten, word, str(path.resolve()))
    return SpecPaths("cmd:" + rewritten, visible=tuple(visible))


def _replace_word(command: str, word: str, new: str) -> str:
    """Replace ``word`` where it stands alone (between spaces or at the ends) in ``command``."""
    parts = command.split(" ")
    return " ".join(shlex.quote(new) if p == word else p for p in parts)
