"""The taxonomy file loads, holds the design's required entries, and rejects inconsistent data."""

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from diageval.cases.taxonomy import Taxonomy, load_taxonomy
from diageval.cli import main

REQUIRED = {
    "input.dataloader_starvation": "cause",
    "checkpoint.blocking_save": "cause",
    "comm.collective_stall": "cause",
    "compute.straggler_rank": "cause",
    "launch.kernel_launch_overhead": "cause",
    "host.device_sync": "cause",
    "compute.load_imbalance": "cause",
    "host.cpu_contention": "cause",
    "symptom.low_utilization": "symptom",
    "symptom.slow_step": "symptom",
    "symptom.step_time_spikes": "symptom",
    "symptom.long_collective": "symptom",
}


def test_builtin_taxonomy_has_the_design_entries():
    tax = load_taxonomy()
    for cid, kind in REQUIRED.items():
        assert tax.kind_of(cid) == kind, cid
    for e in tax.entries:
        assert e.definition and e.evidence
        if e.kind == "cause":
            assert e.symptoms, f"{e.id} lists no usual symptoms"


def _entry(id, kind="cause", symptoms=()):
    return {"id": id, "kind": kind, "definition": "d", "evidence": "e", "symptoms": list(symptoms)}


@pytest.mark.parametrize(
    "entries, message",
    [
        ([_entry("a.b"), _entry("a.b")], "duplicate"),
        ([_entry("a.b", symptoms=["symptom.x"])], "unknown symptom"),
        ([_entry("symptom.x", kind="cause")], "kind symptom"),
        ([_entry("a.b", kind="symptom")], "under 'symptom.'"),
        ([_entry("Not-dotted")], "pattern"),
    ],
)
def test_inconsistent_taxonomy_is_rejected(entries, message):
    with pytest.raises(ValidationError, match=message):
        Taxonomy.model_validate({"version": "x", "entries": entries})


def test_taxonomy_command_prints_every_entry():
    out = CliRunner().invoke(main, ["taxonomy"])
    assert out.exit_code == 0, out.output
    for cid in REQUIRED:
        assert cid in out.output
