"""The ``rules`` diagnoser: trace analysis that tells causes from symptoms (see ``diagnoser``)."""

from diageval.diagnosers.rules.diagnoser import RulesDiagnoser, find_causes

__all__ = ["RulesDiagnoser", "find_causes"]
