"""The one base of every error diageval reports to a person, and the exit code each kind maps to.

A command that fails because of what it was given (a bad case file, a diagnoser that cannot start, a run
folder that does not read) raises a :class:`DiagevalError`; the command line (``diageval.cli``) turns it
into one line on stderr and its :attr:`~DiagevalError.exit_code`, in one place. Anything else that
escapes is a bug in diageval and keeps its traceback.

Exit codes (decided here, after pytest's): 1 a failure of the work asked for (a check failed, a file is
wrong, something could not be read or started); 2 a usage error (options that do not fit together);
130 interrupted.
"""

from __future__ import annotations

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class DiagevalError(Exception):
    """An error diageval reports with its message alone (no traceback) and :attr:`exit_code`."""

    exit_code: int = EXIT_FAILURE


class DiagevalUsageError(DiagevalError):
    """Options or arguments that do not fit together."""

    exit_code = EXIT_USAGE
