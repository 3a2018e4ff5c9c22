"""The diagnosis contract (harness/diagnosis.py): where a finding and its citation may say a cause sits."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from diageval.diagnosis import Citation, Finding


@pytest.mark.parametrize("model", [
    lambda **where: Finding(category="compute.straggler_rank", **where),
    lambda **where: Citation(**where),
], ids=["finding", "citation"])
@pytest.mark.parametrize("where, message", [
    ({"steps": (5, 5)}, "steps: expected [start, stop) with 0 <= start < stop"),
    ({"steps": (6, 2)}, "steps: expected [start, stop) with 0 <= start < stop"),
    ({"ranks": [0, -1]}, "ranks: expected ranks >= 0"),
])
def test_a_finding_and_its_citation_refuse_the_same_ranges(model, where, message):
    with pytest.raises(ValidationError, match=re.escape(message)):
        model(**where)


def test_a_finding_and_its_citation_keep_a_sound_range():
    assert Finding(category="compute.straggler_rank", ranks=[1], steps=(0, 4)).steps == (0, 4)
    assert Citation(ranks=[0, 1], steps=(3, 9)).ranks == [0, 1]
