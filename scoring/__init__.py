"""Scoring: a verdict on every claim and every labeled cause, then metrics with intervals. Pure functions
on cases and diagnoses: no file I/O (run folders are read and written by :mod:`diageval.run.store`).

* :mod:`diageval.scoring.results` — the records (:class:`CaseResult`, one line of ``results.jsonl``;
  :class:`Forecast`, one event of the headline score);
* :mod:`diageval.scoring.verdicts` — :func:`score_case`, (case labels, diagnosis) -> CaseResult;
* :mod:`diageval.scoring.tallies` — the per-case sums every metric is a ratio of;
* :mod:`diageval.scoring.metrics` — the metric table (``METRICS``: every metric defined once; the
  headline, board columns and directions derive from it) and the resampled totals it is read from;
* :mod:`diageval.scoring.intervals` — Jeffreys, BCa and jackknife-t intervals, the bootstrap draw;
* :mod:`diageval.scoring.summary` — :func:`summarize`, CaseResults -> ``summary.json``;
* :mod:`diageval.scoring.compare` — the paired comparison of two runs (``diageval compare``);
* :mod:`diageval.scoring.explain` — plain-text explanation of one CaseResult (``diageval score --case``).

docs/scoring.md defines the numbers and says why.
"""
