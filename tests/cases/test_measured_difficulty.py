"""A case's difficulty is measured: its injection's effect over its healthy twin's noise (issue 11)."""

from __future__ import annotations

import pytest

from diageval.recording.manifest_test import ManifestTest
from diageval.recording.truth import EASY_FROM_Z, HARD_BELOW_Z, NOISE_FLOOR, Verification


def verification(ratio: float, noise: float) -> Verification:
    return Verification(metric="step_time_median", min_ratio=1.2, injected=ratio, healthy=1.0, ratio=ratio,
                        noise=noise, repeats=3, manifested=True, impact=1 - 1 / ratio)


@pytest.mark.parametrize(("ratio", "noise", "level"), [
    (1.3, 0.20, "hard"),     # 1.5 spreads
    (1.3, 0.05, "medium"),   # 6 spreads
    (2.0, 0.25, "medium"),   # 4 spreads
    (2.0, 0.05, "easy"),     # 20 spreads
    (8.0, 0.60, "easy"),     # gross even on a noisy twin
])
def test_difficulty_is_effect_over_noise(ratio, noise, level):
    assert verification(ratio, noise).difficulty == level


def test_the_boundaries_and_the_noise_floor():
    assert verification(1 + HARD_BELOW_Z * 0.1, 0.1).difficulty == "medium"
    assert verification(1 + EASY_FROM_Z * 0.1, 0.1).difficulty == "easy"
    # a twin whose three repeats happen to agree closely is not trusted below the floor
    assert verification(1.2, 0.0).effect_to_noise == pytest.approx(0.2 / NOISE_FLOOR)


def test_the_truth_file_keeps_it():
    v = verification(1.5, 0.1)
    dumped = v.model_dump(mode="json")
    assert dumped["difficulty"] == "medium" and dumped["effect_to_noise"] == pytest.approx(5.0)
    assert Verification.model_validate(dumped).difficulty == "medium"  # read back from an older or newer file


def with_the_test(ratio: float, range_noise: float, shift_sd: float) -> Verification:
    test = ManifestTest(pairs=2, estimate=ratio, statistic=4.0, p_value=1e-4, alpha=0.0025, min_ratio=1.2,
                        shift_sd=shift_sd, autocorrelation=0.1, pair_shifts=[ratio, ratio], manifested=True,
                        decided=True)
    return verification(ratio, range_noise).model_copy(update={"test": test})


def test_with_the_test_the_noise_is_its_shift_sd_not_the_twins_range():
    """Two twin recordings that happen to agree (range 0.01) do not make a 1.5x effect easy: the noise is the
    test's sd of one pair's shift, pooled over the pairs and floored at the recording-level shift."""
    v = with_the_test(1.5, range_noise=0.01, shift_sd=0.2)
    assert v.effect_to_noise == pytest.approx(2.5) and v.difficulty == "hard"
    assert with_the_test(1.5, range_noise=0.9, shift_sd=0.2).difficulty == "hard"  # nor a wide range hard by itself
    assert with_the_test(4.0, range_noise=0.01, shift_sd=0.2).difficulty == "easy"


def test_a_shift_sd_of_zero_is_floored_and_the_record_still_writes():
    """A fleet whose healthy runs agree exactly has shift sd 0 (the fresh-clone CI at 9822dc1 failed to write
    such a record: division by zero in effect_to_noise)."""
    v = with_the_test(1.5, range_noise=0.0, shift_sd=0.0)
    assert v.effect_to_noise == pytest.approx(0.5 / NOISE_FLOOR)
    assert Verification.model_validate_json(v.model_dump_json()).difficulty == "easy"
