"""An external (``cmd:``) diagnoser for the tests: ``python fake_cmd_diagnoser.py BUNDLE OUT``.

Acts on the first line of BUNDLE/logs/rank0.log like tests/fake_diagnosers.py: ``hang``, ``sleep <s>``,
``crash`` (exit 2), ``bad`` (invalid JSON), ``invalid`` (JSON that is not a diagnosis), else writes a
claim. Notes each call (``<pid> <instruction>``) in ``$FAKE_DIAGNOSER_CALLS`` like the in-process fake.
"""

import json
import os
import sys
import time
from pathlib import Path

bundle, out = Path(sys.argv[1]), Path(sys.argv[2])
log = bundle / "logs" / "rank0.log"
what = log.read_text().splitlines()[0].strip() if log.is_file() else ""
print(f"reading {bundle.name}")
if os.environ.get("FAKE_DIAGNOSER_CALLS"):
    with open(os.environ["FAKE_DIAGNOSER_CALLS"], "a") as fh:
        fh.write(f"{os.getpid()} {what.replace(' ', '_') or '-'}\n")
if what.startswith("sleep "):
    time.sleep(float(what.split()[1]))
if what == "hang":
    time.sleep(600)
if what == "crash":
    print("Traceback: cannot parse this trace", file=sys.stderr)
    sys.exit(2)
if what == "bad":
    out.write_text("{not json")
    sys.exit(0)
if what == "invalid":
    out.write_text(json.dumps({"findings": "none"}))
    sys.exit(0)
out.write_text(json.dumps({"findings": [{"category": "compute.straggler_rank", "confidence": 0.6}]}))
