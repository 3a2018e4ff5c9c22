"""What a ``--diagnoser`` spec needs to see inside its box, found without importing or running anything.

Only what the spec names is bound, read-only, and never the folder around it:

* ``module:attr``: the top-level module's file, or its package folder, located with ``PathFinder`` (which
  reads the file system and executes nothing); its folder goes on the box's ``PYTHONPATH``, where the
  box shows nothing else. An entry-point name is located the same way from its entry point's module.
  Modules inside the Python installation are visible anyway; ``diageval``'s own modules too.
* ``cmd:``: every word of the command that names an existing file or folder (relative words are taken
  from the current directory and rewritten as absolute paths, because the program's working directory
  is its case folder). A program that needs more files than its command line names must name them, or
  be installed. Words under ``/proc``, ``/dev`` and ``/sys`` are never bound (the box has its own), so
  ``/proc/self/fd/2`` is the box's own stderr, never the harness's.

Refused (:class:`~diageval.hosting.errors.SpecPathError`, saying why): a path inside the cache, the run
folders or the cases, a folder in the checkout, and anything in which
:func:`~diageval.hosting.label_stores.refusal` finds a label store or the file the harness logs to.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from importlib.machinery import PathFinder
from pathlib import Path

from diageval.hosting.box_policy import HiddenRoots
from diageval.hosting.errors import SpecPathError
from diageval.hosting.python_paths import in_python

BOX_OWN = ("/proc", "/dev", "/sys")  # the box mounts its own: a word there names nothing of the host


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
        return _module_paths(spec, spec.partition(":")[0], roots, Path(cwd or Path.cwd()))
    return _entry_point_paths(spec, roots, Path(cwd or Path.cwd()))


def _entry_point_paths(spec: str, roots: HiddenRoots, cwd: Path) -> SpecPaths:
    """An entry point's module, located like an import string's (metadata only, nothing is loaded)."""
    from diageval.hosting.registry import diagnoser_entry_points

    eps = diagnoser_entry_points().get(spec, [])
    if len(eps) != 1:
        return SpecPaths(spec)  # unknown or ambiguous: the registry says so in the worker
    module = eps[0].value.partition(":")[0].strip()
    found = _module_paths(spec, module, roots, cwd)
    return SpecPaths(spec, visible=found.visible, python_path=found.python_path)


def _module_paths(spec: str, module: str, roots: HiddenRoots, cwd: Path) -> SpecPaths:
    top = module.split(".")[0]
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
    if in_python(location):
        return SpecPaths(spec)  # the Python installation is visible as it is
    shown, why = roots.may_show(location)
    if shown is None:
        raise SpecPathError(f"{spec!r}: module {top!r} is at {location}, which a sandboxed diagnoser may not see: {why}; "
                            "install it as a package, or move it to a folder of its own")
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
        if any(str(path) == d or str(path).startswith(d + "/") for d in BOX_OWN):
            continue
        if not path.exists() or str(path.resolve()) in ("/", str(cwd.resolve())):
            continue
        if any(str(path.resolve()) == d or str(path.resolve()).startswith(d + "/") for d in BOX_OWN):
            continue  # a link into /proc (e.g. to the harness's own file descriptors)
        shown, why = roots.may_show(path)
        if shown is None:
            raise SpecPathError(f"{spec!r}: {word} may not be shown to a sandboxed diagnoser: {why}; "
                                "move the program to a folder of its own, or install it")
        visible.append(shown)
        if not Path(word).is_absolute() and ("/" in word or path.is_file()):
            rewritten = _replace_word(rewritten, word, str(path.resolve()))
    return SpecPaths("cmd:" + rewritten, visible=tuple(visible))


def _replace_word(command: str, word: str, new: str) -> str:
    """Replace ``word`` where it stands alone (between spaces or at the ends) in ``command``."""
    parts = command.split(" ")
    return " ".join(shlex.quote(new) if p == word else p for p in parts)
