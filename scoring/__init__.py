"""Scoring: a verdict on every claim and every labeled cause, then metrics with bootstrap intervals.

* :mod:`diageval.scoring.results` — the records (:class:`CaseResult`, one line of ``results.jsonl``);
* :mod:`diageval.scoring.verdicts` — :func:`score_case`, (case labels, diagnosis) -> CaseResult;
* :mod:`diageval.scoring.tallies` — the per-case sums every metric is a ratio of;
* :mod:`diageval.scoring.metrics` — metric definitions and their bootstrap intervals;
* :mod:`diageval.scoring.summary` — :func:`summarize`, CaseResults -> ``summary.json``;
* :mod:`diageval.scoring.explain` — plain-text explanation of one CaseResult (``diageval score --case``).
"""
