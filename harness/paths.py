"""Where diageval finds its built-in data and keeps its working state.

* Built-in cases and taxonomy: ``$DIAGEVAL_CASES`` if set, else the corpus shipped inside the package
  (``diageval.corpus``, found through ``importlib.resources``). A checkout maps that package onto its
  top-level ``cases/`` folder (``pyproject.toml``'s ``package-dir``), so contributors edit ``cases/``
  and an installed wheel carries a copy of it: one source of truth, found the same way in both.
* Real traces recorded by others (tests and benchmarks of a checkout read them; the repo ships no copy):
  ``$DIAGEVAL_DATA`` if set, else ``shared/real-traces`` beside the checkout.
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
    """The folder recorded cases name their trace files in: ``given`` (``--data``), else ``$DIAGEVAL_DATA``,
    else ``../shared/real-traces`` beside the source tree (where the tests and CI find the real traces)."""
    if given is not None:
        return Path(given)
    env = os.environ.get("DIAGEVAL_DATA")
    return Path(env) if env else SOURCE_ROOT.parent / "shared" / "real-traces"


def home_dir() -> Path:
    env = os.environ.get("DIAGEVAL_HOME")
    return Path(env) if env else Path.cwd() / ".diageval"


def bundle_cache_dir() -> Path:
    return home_dir() / "bundles"


def default_runs_dir() -> Path:
    return Path.cwd() / "runs"
