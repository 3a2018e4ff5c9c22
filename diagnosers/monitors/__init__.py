"""Adapters of in-job monitors (issue 27 item 4): each turns the raw output its monitor wrote inside the
recorded job (the bundle's ``monitor/`` folder; ``diageval.recording.monitors``) into a Diagnosis. They run
boxed like every diagnoser and read nothing of the bundle but ``monitor/``. Run one with
``diageval run --diagnoser NAME``: the run records each case again with the monitor installed.
"""

MONITOR_DIR = "monitor"  # the same folder name as diageval.recording.monitors.hooks.MONITOR_DIR (a test checks)
