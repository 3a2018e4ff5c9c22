"""The ``rules`` diagnoser: trace analysis that tells causes from symptoms (entry point: ``diagnoser.RulesDiagnoser``)."""
