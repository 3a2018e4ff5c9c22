"""diageval: measure whether automated performance diagnosers are right.

The package is laid out as the design asks (``../shared/design.md``):
``diageval`` (this folder, ``harness/``) holds the cases, recording and run pipeline;
``diageval.diagnosers``, ``diageval.scoring`` and ``diageval.reports`` hold the rest.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("diageval")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
