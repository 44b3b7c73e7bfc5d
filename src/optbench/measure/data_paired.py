"""A data case timed against its group's eager loader in ABBA blocks (optbench.measure.paired decides
when to stop and what the interval is; this module only says what a block is).

A block is one epoch over a fixed subset of the dataset, `PipelineConfig.block_batches` batches (all
of it when it holds fewer). An epoch, because what a loader setting changes is an epoch's time, stalls and worker
start-up included; a subset, because the fewest pairs (10) of whole epochs of the run's dataset would
cost minutes a case on a 2-core CPU. Each side's
loader is built once and kept alive for the case; each block starts a fresh iterator and runs it to
its end, so neither side's workers run during the other side's block (workers without persistence
start and stop within each block, persistent ones stay up and idle between blocks, as across epochs
of training), and the eager side gets exactly the same treatment.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from optbench.catalog.techniques.data_loader import LoaderSettings
from optbench.matrix.profiles import TimingPolicy
from optbench.measure.data import Step, epochs, make_loader, pins
from optbench.measure.paired import BLOCK_S, PairedResult, time_paired


def block_indices(images: int, batch_size: int, block_batches: int) -> list[int]:
    """The subset every block of a group reads: the same images for the case and its eager side
    (a seeded draw, so image sizes are a fair sample of the dataset's), in file order."""
    wanted = min(images, block_batches * batch_size)
    drawn = torch.randperm(images, generator=torch.Generator().manual_seed(0))[:wanted]
    return sorted(drawn.tolist())


class Feeder:
    """One side of the pairs: a DataLoader over the block's subset, built once, feeding `step`."""

    def __init__(
        self,
        dataset: torch.utils.data.Dataset,
        settings: LoaderSettings,
        batch_size: int,
        indices: list[int],
        step: Step,
        device: torch.device,
    ) -> None:
        subset = torch.utils.data.Subset(dataset, indices)
        self.loader = make_loader(subset, settings, batch_size, drop_last=True)
        self.step, self.device = step, device
        self.pin = pins(settings)
        self.batch_s: list[float] = []
        """Every batch fed so far, seconds: fetching it (stalls included) and its training step."""

    def epoch(self) -> None:
        """One block: a whole epoch of the subset through a fresh iterator, ended within the block."""
        batches = epochs(self.loader, 1)
        started = time.perf_counter()
        for x, y in batches:  # the first batch's time holds the iterator's start (workers spawning)
            self.step(x.to(self.device, non_blocking=self.pin), y.to(self.device, non_blocking=self.pin))
            now = time.perf_counter()
            self.batch_s.append(now - started)
            started = now


def time_against_eager(
    case: Any,
    eager: Any,
    policy: TimingPolicy,
    clock: Callable[[], float] = time.perf_counter,
) -> PairedResult:
    """`case.epoch` against `eager.epoch` in ABBA blocks, one epoch a block; each side's `batch_s`
    then holds only its timed blocks' batches. Any object with `epoch()` and `batch_s` will do."""
    # One untimed epoch each: the case's first spawns its persistent workers (once per training run,
    # not per epoch), and eager's caches were the previous case's for a while.
    for side in (eager, case):
        side.epoch()
        side.batch_s.clear()
    # A block is one epoch however short: its time is the epoch's, so the pair's ratio is one of total
    # epoch times (stalls included), not of a median call, and no epoch is run untimed between.
    return time_paired(case.epoch, eager.epoch, BLOCK_S, policy.budget_s, policy.target_rel_ci, clock)
