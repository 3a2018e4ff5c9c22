"""Where diageval finds its built-in data and keeps its working state.

* Built-in cases and taxonomy: ``$DIAGEVAL_CASES`` if set, else the corpus shipped inside the package
  (``diageval.corpus``, found through ``importlib.resources``). A checkout maps that package onto its
  top-level ``cases/`` folder (``pyproject.toml``'s ``package-dir``), so contributors edit ``cases/``
  and an installed wheel carries a copy of it: one source of truth, found the same way in both.
* Real traces recorded by others (the repo ships no copy; a recorded case names each file by path and
  sha256): ``--data`` or ``$DIAGEVAL_DATA`` if given, else the user cache folder (``~/.cache/diageval/
  real-traces`` on Linux, platformdirs' ``user_cache_dir``), which ``diageval data fetch`` fills from each
  file's public source; ``shared/real-traces`` beside the checkout, where it exists, is searched after it
  (read-only, never written). Tests and benchmarks of a checkout read that shared folder directly.
* Working state (bundle cache, ground truth): ``$DIAGEVAL_HOME`` if set, else ``.diageval/`` in the
  current directory. Runs go to ``runs/`` in the current directory unless ``--out`` says otherwise.
  Nothing is ever written inside the installed package.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parent.parent  # the checkout, for an editable install (git sha)
CORPUS_PACKAGE = "diageval.corpus"


def builtin_cases_dir() -> Path:
    """The corpus shipped with this installation (a checkout's ``cases/`` in an editable install)."""
    return Path(str(files(CORPUS_PACKAGE)))


def default_cases_dir() -> Path:
    env = os.environ.get("DIAGEVAL_CASES")
    return Path(env) if env else builtin_cases_dir()


def default_taxonomy_path(cases_dir: Path | None = None) -> Path:
    return (cases_dir or default_cases_dir()) / "taxonomy.yaml"


def real_traces_dir(given: Path | None = None) -> Path:
    """The real traces a checkout's tests and benchmarks read: ``given``, else ``$DIAGEVAL_DATA``, else
    ``../shared/real-traces`` beside the source tree (where the tests and CI find them). Recorded cases
    look their files up in :func:`data_dirs`."""
    if given is not None:
        return Path(given)
    env = os.environ.get("DIAGEVAL_DATA")
    return Path(env) if env else SOURCE_ROOT.parent / "shared" / "real-traces"


def data_dir(given: Path | None = None) -> Path:
    """Where ``diageval data fetch`` writes recorded cases' trace files: ``given`` (``--data``), else
    ``$DIAGEVAL_DATA``, else the user cache folder (platformdirs' ``user_cache_dir``/real-traces)."""
    if given is not None:
        return Path(given)
    env = os.environ.get("DIAGEVAL_DATA")
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("diageval")) / "real-traces"


def data_dirs(given: Path | None = None) -> list[Path]:
    """Where a recorded case's trace files are looked for, in order: :func:`data_dir`; when neither ``--data``
    nor ``$DIAGEVAL_DATA`` names one, then ``../shared/real-traces`` beside the source tree where it exists
    (a read-only fallback: nothing writes there)."""
    first = data_dir(given)
    shared = SOURCE_ROOT.parent / "shared" / "real-traces"
    if given is None and not os.environ.get("DIAGEVAL_DATA") and shared.is_dir() and shared != first:
        return [first, shared]
    return [first]


def home_dir() -> Path:
    env = os.environ.get("DIAGEVAL_HOME")
    return Path(env) if env else Path.cwd() / ".diageval"


def bundle_cache_dir() -> Path:
    return home_dir() / "bundles"


def default_runs_dir() -> Path:
    return Path.cwd() / "runs"
