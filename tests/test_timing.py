import math

import numpy as np
import pytest

from optbench.matrix.profiles import TimingPolicy
from optbench.measure.timing import plan_rounds, settled, warm_up
from optbench.results.derive import latency_stats, median_rel_ci95


def test_latency_stats_in_milliseconds():
    samples = [0.010, 0.011, 0.012, 0.013, 0.014, 0.015, 0.016, 0.017, 0.018, 0.019, 0.020]
    s = latency_stats(samples, TimingPolicy())
    assert s["latency_ms_min"] == pytest.approx(10.0)
    assert s["latency_ms_median"] == pytest.approx(15.0)
    assert s["latency_ms_mean"] == pytest.approx(15.0)
    assert s["latency_ms_stddev"] == pytest.approx(np.std(np.array(samples) * 1e3, ddof=1))
    assert s["latency_ms_iqr"] == pytest.approx(5.0)
    assert s["latency_ms_p90"] == pytest.approx(19.0)
    assert s["rounds"] == 11
    assert s["noisy"] is True  # IQR is a third of the median


def test_precision_flags():
    steady = [0.100 + 0.0001 * (i % 3) for i in range(40)]
    s = latency_stats(steady, TimingPolicy(target_rel_ci=0.02))
    assert s["precision_met"] is True and s["noisy"] is False
    assert s["rel_ci95"] < 0.002
    few = latency_stats([0.1, 0.1, 0.1], TimingPolicy())
    assert math.isnan(few["rel_ci95"]) and few["precision_met"] is False
    assert math.isnan(median_rel_ci95(np.array([1.0, 2.0])))


def test_plan_rounds_follows_spread_and_budget():
    policy = TimingPolicy(budget_s=1.0, min_rounds=5, max_rounds=1000, target_rel_ci=0.02)
    # No spread: the minimum is enough.
    assert plan_rounds([0.01] * 10, policy) == 5
    # 10% spread needs about (1.96 * 1.2533 * 0.1 / 0.02)^2 = 150 rounds; 10 ms calls allow 100 in 1 s.
    rng = np.random.default_rng(0)
    noisy = list(0.01 * (1 + 0.1 * rng.standard_normal(400)))
    assert plan_rounds(noisy, policy) == pytest.approx(100, abs=3)
    assert plan_rounds(
        noisy, TimingPolicy(budget_s=100.0, min_rounds=5, target_rel_ci=0.02)
    ) == pytest.approx(150, rel=0.25)
    # Slow calls: the minimum wins over the budget.
    assert plan_rounds([2.0] * 4, policy) == 5


def test_warm_up_runs_at_least_the_minimum_rounds(monkeypatch):
    import optbench.measure.timing as timing

    calls = []

    def steady(call, rounds):  # fixed durations: the test must not depend on how busy the machine is
        call()
        return [0.01]

    monkeypatch.setattr(timing, "time_calls", steady)
    pilot = warm_up(lambda: calls.append(1), TimingPolicy(warmup_s=0.0, warmup_rounds=7))
    assert len(pilot) == len(calls) == 7


def test_settled_waits_for_calls_to_stop_getting_faster():
    slow_start = [0.096, 0.098, 0.094, 0.081, 0.059, 0.080]
    assert not settled(slow_start)
    assert not settled([*slow_start, 0.057, 0.059, 0.058])
    assert settled([*slow_start, 0.057, 0.059, 0.058, 0.058, 0.060, 0.057])
    assert settled([0.05] * 6) and not settled([0.05] * 5)


def test_warm_up_keeps_going_while_calls_get_faster(monkeypatch):
    import optbench.measure.timing as timing

    durations = iter(
        [0.096, 0.098, 0.094, 0.081, 0.059, 0.080, 0.057, 0.059, 0.058, 0.058, 0.060, 0.057] + [0.058] * 50
    )
    monkeypatch.setattr(timing, "time_calls", lambda call, rounds: [next(durations)])
    pilot = warm_up(lambda: None, TimingPolicy(warmup_s=0.0, warmup_rounds=3))
    assert len(pilot) == 10  # the 10th call is the first whose window is no faster than the one before
