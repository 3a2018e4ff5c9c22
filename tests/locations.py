"""Where the test suite's files are, for tests laid out by room (tests/<room>/test_*.py): the checkout, and the
folder of the shared helpers (fakes, synthetic traces, scripted diagnosers) that tests of several rooms use."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent  # the shared helpers: tests/*.py beside this file
REPO = TESTS.parent
