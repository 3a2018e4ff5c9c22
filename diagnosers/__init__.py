"""Diagnosers: the systems under test, and the reference baselines every leaderboard carries."""
