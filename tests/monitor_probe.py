"""A probe in-job monitor, and a script that records a short case with it installed (tests/recording/test_monitors.py).

Run as a script: ``python tests/monitor_probe.py OUT_DIR [MONITOR...] [WORD...]`` (words that are not a
monitor's name only fill argv, which must not reach a monitor). The probe is registered into the
monitor registry at import (top level, not under ``__main__``): the recorder's forkserver re-imports this
file as ``__mp_main__`` in every rank, so the registry of each rank holds it too, exactly as a real
monitor's entry. The probe writes down everything it is handed and everything the process shows it
without searching (its context, environment, argv, working directory, the folder it writes to), one JSON
file per rank; the test greps that for the case id, the fault name, its parameter names and values, and
the labels. With MONITOR names after the folder, the same case is recorded once per monitor (the live
check of the shipped monitors' in-job parts).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from diageval.recording.monitors import MONITORS, MonitorInfo
from diageval.recording.monitors.hooks import MonitorContext, StepMonitor, StepPhases

PROBE = "probe"
CASE_ID = "straggler-rank1"  # two ranks, a live fault with parameters
STEPS = 6

MONITORS[PROBE] = MonitorInfo(name=PROBE, summary="test probe", impl="__mp_main__:Probe", distribution="diageval")


class Probe(StepMonitor):
    def __init__(self, ctx: MonitorContext):
        super().__init__(ctx)
        self.steps: list[dict] = []
        self.seen = {
            "context_fields": sorted(f.name for f in dataclasses.fields(ctx)),
            "context": {k: str(v) for k, v in dataclasses.asdict(ctx).items()},
            "environ": dict(os.environ),
            "argv": list(sys.argv),
            "cwd_is_checkout": os.getcwd(),
            "out_dir_listing": sorted(p.name for p in ctx.out_dir.iterdir()),
        }

    def on_step(self, phases: StepPhases) -> None:
        self.steps.append(dataclasses.asdict(phases))

    def finish(self, failed: bool) -> None:
        self.seen["steps"] = self.steps
        self.seen["failed"] = failed
        (self.ctx.out_dir / f"probe-rank{self.ctx.rank}.json").write_text(json.dumps(self.seen), encoding="utf-8")


def main() -> None:
    from diageval.cases.load import load_case_set
    from diageval.recording.record import record_case

    out = Path(sys.argv[1])
    case = load_case_set(None).select([CASE_ID])[0].case
    case = case.model_copy(update={"workload": case.workload.model_copy(update={"steps": STEPS})})
    os.environ["DIAGEVAL_CASES"] = str(Path(__file__).resolve().parent.parent / "cases")  # must not reach a monitor
    for name in [PROBE, *(a for a in sys.argv[2:] if a in MONITORS and a != PROBE)]:  # other words: argv filler
        record_case(case, out / name, device="cpu", monitor=name)


if __name__ == "__main__":
    main()
