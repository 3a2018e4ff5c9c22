"""diageval: measure whether automated performance diagnosers are right.

One folder per stage of the flow (``docs/architecture.md``): ``diageval.cases``, ``diageval.bundle``,
``diageval.recording`` and ``diageval.run`` (folder ``harness/``), then ``diageval.diagnosers``,
``diageval.scoring`` and ``diageval.reports``; the built-in corpus ships as ``diageval.corpus``.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("diageval")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
