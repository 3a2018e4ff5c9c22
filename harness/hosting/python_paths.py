"""Which of the host's folders hold the Python a box runs and the programs on its ``$PATH``, and two path
helpers every part of hosting shares. :mod:`diageval.hosting.sandbox` binds what this finds.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path


def real_path(p: Path) -> Path:
    return Path(os.path.realpath(p))


def is_within(p: Path, root: Path) -> bool:
    return p == root or root in p.parents


def python_homes() -> list[Path]:
    """The running Python's prefixes, resolved (a venv's and its base interpreter's)."""
    return [real_path(Path(p)) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)]


def in_python(p: Path) -> bool:
    """Whether ``p`` lies inside the running Python's prefixes (a venv inside the checkout included)."""
    rp = real_path(Path(p))
    return any(is_within(rp, home) for home in python_homes())



def python_paths() -> list[tuple[Path, bool]]:
    """(folder, whether to look through it first) for the Python installation: its prefixes, the
    interpreter's folder, and the installation's own ``sys.path`` (:func:`installation_path`: the standard
    library, the site folders and what their ``.pth`` files add). Never the current directory, a
    ``PYTHONPATH`` entry or a folder put on ``sys.path`` at run time: a diagnoser's own module is made
    visible by itself (``SandboxPolicy.visible``), and a folder beside it could hold anything. A ``.pth``
    folder outside the prefixes is bound as it is when it is a site folder (``site-packages``,
    ``dist-packages``: another environment's packages), else only when it holds no label store (an
    editable install's project folder)."""
    paths = [(Path(p), False) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, Path(sys.executable).parent)]
    for entry in installation_path():
        site_folder = real_path(Path(entry)).name in ("site-packages", "dist-packages")
        paths.append((Path(entry), not in_python(Path(entry)) and not site_folder))
    return paths


@functools.lru_cache(maxsize=1)
def installation_path() -> tuple[str, ...]:
    """``sys.path`` as this interpreter sets it up by itself: asked of a fresh one with ``-E`` (no
    ``PYTHONPATH``) from ``/``, so that neither the environment nor anything inserted at run time counts."""
    try:
        out = subprocess.run([sys.executable, "-E", "-c", "import sys; print('\\0'.join(sys.path))"], cwd="/",
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(p for p in out.stdout.rstrip("\n").split("\0") if p) if out.returncode == 0 else ()


def path_dirs() -> list[str]:
    return [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and os.path.isabs(d)]
