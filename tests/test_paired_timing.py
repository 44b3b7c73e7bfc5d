"""Paired timing against eager (optbench.measure.paired) on a simulated machine: drift cancels, the
interval covers, and the stopping rule stops when the answer is known."""

from __future__ import annotations

import math
import random

import pytest

from optbench.measure.paired import LOOKS, median_interval, time_paired


class Machine:
    """A fake clock whose calls take `seconds x slowdown(now)`: a machine that drifts."""

    def __init__(self, drift_per_s: float = 0.0, noise: float = 0.0, seed: int = 0):
        self.now, self.drift, self.noise, self.rng = 0.0, drift_per_s, noise, random.Random(seed)

    def clock(self) -> float:
        return self.now

    def work(self, seconds: float):
        def call():
            jitter = 1 + self.rng.uniform(-self.noise, self.noise)
            self.now += seconds * (1 + self.drift * self.now) * jitter

        return call


def test_pairing_cancels_a_steady_drift_that_a_case_timed_after_its_baseline_would_not():
    machine = Machine(drift_per_s=0.05, noise=0.02)  # 5% slower every second of the case
    case, eager = machine.work(0.010), machine.work(0.020)  # the case is truly 2x faster
    found = time_paired(case, eager, 0.020, budget_s=30.0, target_rel_ci=0.001, clock=machine.clock)
    assert found.low <= 2.0 <= found.high, (found.low, found.high)
    assert found.speedup == pytest.approx(2.0, rel=0.03)
    # The same machine, eager timed first and the case after (what optbench did before): biased.
    machine = Machine(drift_per_s=0.05, noise=0.02)
    before = [machine.now]
    for _ in range(400):
        machine.work(0.020)()
    eager_time = (machine.now - before[0]) / 400
    start = machine.now
    for _ in range(400):
        machine.work(0.010)()
    unpaired = eager_time / ((machine.now - start) / 400)
    assert unpaired < 1.8  # the drift alone took over 10% off the speedup


def test_a_hopeless_case_stops_at_the_first_look():
    machine = Machine(noise=0.01)
    found = time_paired(machine.work(0.5), machine.work(0.05), 0.5, 600.0, 0.01, clock=machine.clock)
    assert found.stop_reason == "hopeless" and found.pairs == LOOKS[0]
    assert found.speedup == pytest.approx(0.1, rel=0.05)


def test_a_clear_winner_stops_when_decided_and_no_difference_when_within_the_margin():
    machine = Machine(noise=0.05, seed=1)
    found = time_paired(machine.work(0.01), machine.work(0.02), 0.02, 600.0, 0.0001, clock=machine.clock)
    assert found.stop_reason == "decided" and found.low > 1.03 and found.pairs in LOOKS
    machine = Machine(noise=0.002, seed=2)
    same = time_paired(machine.work(0.01), machine.work(0.01), 0.01, 600.0, 0.0001, clock=machine.clock)
    assert same.stop_reason == "decided" and 1 / 1.03 <= same.low <= same.high <= 1.03


def test_the_budget_stops_a_case_whose_answer_is_not_known():
    machine = Machine(noise=0.5, seed=3)
    found = time_paired(machine.work(0.1), machine.work(0.1), 0.1, 3.0, 0.0001, clock=machine.clock)
    # 0.2 s a pair (one call a block each side): the 3 s budget ends it at pair 15, between looks
    assert found.stop_reason == "budget" and found.pairs == 15
    slow = time_paired(machine.work(1.0), machine.work(1.0), 1.0, 3.0, 0.0001, clock=machine.clock)
    assert slow.stop_reason == "budget" and slow.pairs == LOOKS[0]  # never fewer than the first look
    assert found.low <= 1.0 <= found.high and found.confidence >= 0.99


def test_the_median_interval_covers_at_its_stated_rate():
    rng = random.Random(7)
    misses = 0
    for _ in range(2000):
        values = [rng.lognormvariate(0, 0.3) for _ in range(16)]  # true median 1.0
        low, high, confidence = median_interval(values, 0.95)
        assert confidence >= 0.95
        misses += not (low <= 1.0 <= high)
    assert misses / 2000 <= 0.05 + 0.015  # 3 standard errors above the stated rate at most
    assert all(math.isnan(x) for x in median_interval([1.0, 2.0, 3.0], 0.95))


def test_two_preparations_take_turns_in_both_orders_and_the_interval_holds_their_spread():
    machine = Machine(noise=0.01, seed=4)
    order: list[str] = []

    def tagged(name: str, seconds: float):
        work = machine.work(seconds)

        def call():
            order.append(name)
            work()

        return call

    # Two preparations of one technique: 2.0x and 1.6x against eager (0.020 s).
    fast, slow, eager = tagged("fast", 0.010), tagged("slow", 0.0125), tagged("eager", 0.020)
    found = time_paired([fast, slow], eager, 0.020, 600.0, 0.0001, clock=machine.clock)
    # pairs 0, 1 the first preparation (A B, then B A), pairs 2, 3 the second, and so on
    assert found.preparation_of_pair[:6] == [0, 0, 1, 1, 0, 0]
    blocks = [name for i, name in enumerate(order) if i == 0 or order[i - 1] != name]  # runs of one side
    assert blocks[:7] == ["fast", "eager", "fast", "slow", "eager", "slow", "fast"]
    first, second = found.by_preparation()
    assert first == pytest.approx(2.0, rel=0.03) and second == pytest.approx(1.6, rel=0.03)
    assert found.low <= 1.62 and found.high >= 1.98  # one preparation's interval would miss the other
    # With one preparation, nothing changes: the same alternation as ever.
    one = time_paired(fast, eager, 0.020, 600.0, 0.0001, clock=machine.clock)
    assert set(one.preparation_of_pair) == {0} and one.by_preparation() == [one.speedup]
