"""Where diageval finds its built-in data and keeps its working state.

* Built-in cases: ``$DIAGEVAL_CASES`` if set, else the ``cases/`` folder of the source tree this package
  was installed from (the README's set-up is an editable install, so that folder is always there).
* Working state (bundle cache, run folders): ``$DIAGEVAL_HOME`` if set, else ``.diageval/`` in the
  current directory. Runs go to ``runs/`` in the current directory unless ``--out`` says otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parent.parent


def default_cases_dir() -> Path:
    env = os.environ.get("DIAGEVAL_CASES")
    return Path(env) if env else SOURCE_ROOT / "cases"


def default_taxonomy_path(cases_dir: Path | None = None) -> Path:
    return (cases_dir or default_cases_dir()) / "taxonomy.yaml"


def home_dir() -> Path:
    env = os.environ.get("DIAGEVAL_HOME")
    return Path(env) if env else Path.cwd() / ".diageval"


def bundle_cache_dir() -> Path:
    return home_dir() / "bundles"


def default_runs_dir() -> Path:
    return Path.cwd() / "runs"
