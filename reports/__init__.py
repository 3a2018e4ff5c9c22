"""Reports: the markdown leaderboard of runs (:mod:`diageval.reports.leaderboard`) and the
``diageval report`` pipeline that reads run folders (:mod:`diageval.reports.report`)."""
