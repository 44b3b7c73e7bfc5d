"""Data cases paired with their eager loader (optbench.measure.data_paired), on a simulated machine:
real DataLoaders over a dataset whose reads, like the training step, take fake seconds on a fake
clock that drifts, so the true speedup of an epoch is known."""

from __future__ import annotations

import random

import pytest
import torch

from optbench.catalog.techniques.data_loader import LoaderSettings
from optbench.matrix.profiles import TimingPolicy
from optbench.measure.data_paired import Feeder, block_indices, time_against_eager
from optbench.measure.paired import LOOKS

BATCH, IMAGES = 2, 20


class Machine:
    """A fake clock whose work takes `seconds x (1 + drift x now)`: a machine that slows down."""

    def __init__(self, drift_per_s: float, noise: float = 0.02, seed: int = 0) -> None:
        self.now, self.drift, self.noise, self.rng = 0.0, drift_per_s, noise, random.Random(seed)

    def clock(self) -> float:
        return self.now

    def work(self, seconds: float) -> None:
        self.now += seconds * (1 + self.drift * self.now) * (1 + self.rng.uniform(-self.noise, self.noise))


class Images(torch.utils.data.Dataset):
    """Reading an image costs `read_s` on the machine."""

    def __init__(self, machine: Machine, read_s: float) -> None:
        self.machine, self.read_s = machine, read_s

    def __len__(self) -> int:
        return IMAGES

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        self.machine.work(self.read_s)
        return torch.zeros(3), i % 2


def _feeders(machine: Machine) -> tuple[Feeder, Feeder]:
    """The eager loader reads at 10 ms an image, the case's at 2.5 ms; a step takes 10 ms. An epoch
    of 2 batches of 2: eager 2 x (20 + 10) ms, the case 2 x (5 + 10) ms, truly 2.0x faster."""

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        machine.work(0.010)
        return x.sum()

    indices = block_indices(IMAGES, BATCH, block_batches=2)
    cpu = torch.device("cpu")
    eager = Feeder(Images(machine, 0.010), LoaderSettings(), BATCH, indices, step, cpu)
    case = Feeder(Images(machine, 0.0025), LoaderSettings(shuffle=False), BATCH, indices, step, cpu)
    return case, eager


def test_the_block_subset_is_fixed_and_the_whole_dataset_when_it_is_small():
    assert block_indices(20, 2, 2) == block_indices(20, 2, 2) and len(block_indices(20, 2, 2)) == 4
    assert block_indices(20, 2, 2) == sorted(set(block_indices(20, 2, 2)))
    assert block_indices(6, 4, 4) == list(range(6))


def test_a_data_case_paired_with_eager_holds_the_true_speedup_through_a_drift():
    machine = Machine(drift_per_s=0.5)  # 50% slower every second of the case
    case, eager = _feeders(machine)
    policy = TimingPolicy(budget_s=600.0, target_rel_ci=0.001)
    found = time_against_eager(case, eager, policy, clock=machine.clock)
    assert found.low <= 2.0 <= found.high, (found.low, found.high)
    assert found.speedup == pytest.approx(2.0, rel=0.05)
    assert found.pairs >= LOOKS[0] and found.stop_reason
    # One sample per timed block's batch (the untimed first epochs are not among them).
    assert len(case.batch_s) == len(eager.batch_s) == 2 * found.pairs
    # The same machine, eager's epochs timed first and the case's after (how data cases were timed
    # before): the drift alone takes well over 10% off the speedup.
    machine = Machine(drift_per_s=0.5)
    case, eager = _feeders(machine)
    took = []
    for side in (eager, case):
        started = machine.now
        for _ in range(found.pairs):
            side.epoch()
        took.append(machine.now - started)
    assert took[0] / took[1] < 1.8, took
