"""Speedup intervals from raw samples, and the "no clear difference" verdict."""

import numpy as np

from optbench.results.derive import clear_difference, speedup_interval


def test_twice_as_fast_has_an_interval_around_two_that_excludes_one():
    rng = np.random.default_rng(1)
    base = 10 * (1 + 0.05 * rng.standard_normal(40))
    case = 5 * (1 + 0.05 * rng.standard_normal(40))
    low, high = speedup_interval(base, case)
    assert 1.8 < low < 2.0 < high < 2.2
    assert clear_difference(low, high) is True


def test_the_same_distribution_has_an_interval_containing_one():
    rng = np.random.default_rng(2)
    base, case = 10 + rng.standard_normal(30), 10 + rng.standard_normal(30)
    low, high = speedup_interval(base, case)
    assert low < 1.0 < high and clear_difference(low, high) is False


def test_the_interval_is_seeded_and_unknown_without_samples():
    base, case = [10.0, 11.0, 9.5, 10.2], [8.0, 8.5, 7.9, 8.1]
    assert speedup_interval(base, case) == speedup_interval(base, case)
    low, high = speedup_interval([10.0], case)
    assert np.isnan(low) and clear_difference(low, high) is None


def test_the_verdict_needs_the_interval_beyond_the_margin_on_either_side():
    from optbench.results.derive import MARGIN, speed_verdict

    assert MARGIN == 0.03
    assert speed_verdict(1.04, 1.2) == "faster" and speed_verdict(0.8, 0.95) == "slower"
    # wholly above 1.0 or below it, but reaching into 0.971-1.03: no difference that counts
    assert speed_verdict(1.01, 1.2) == "no clear difference" and clear_difference(1.01, 1.2) is False
    assert speed_verdict(0.8, 0.98) == "no clear difference"
    assert speed_verdict(0.99, 1.02) == "no clear difference"  # within the margin: no gain
    assert speed_verdict(float("nan"), 1.2) == "unknown" and speed_verdict(None, None) == "unknown"
