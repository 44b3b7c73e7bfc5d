"""Latency measurement policy and statistics.

A case is warmed up until its per-call time is stable enough to plan from, then timed for as many
rounds as a stated precision needs, capped by a time budget. The precision actually reached is
reported (rel_ci95) and a case whose spread is wide is flagged noisy instead of silently trusted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from optbench.matrix.profiles import TimingPolicy

# Asymptotic variance of the sample median relative to the mean for normal data is pi/2, so its
# standard error is sqrt(pi/2) ~ 1.2533 times the mean's. Used to plan rounds from a pilot's spread.
_MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)
_Z95 = 1.959964


def time_calls(
    call: Callable[[], object], rounds: int, before: Callable[[], None] | None = None
) -> list[float]:
    """Bare perf_counter loop: seconds per call (`before` runs untimed before each call)."""
    samples = []
    for _ in range(rounds):
        if before is not None:
            before()
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return samples


class Pacer(Protocol):
    """Hands the machine to someone else between timing rounds (`optbench ab`'s lockstep slicer)."""

    slices: int
    rounds_per_slice: int

    def pause(self, samples: int) -> None: ...


def slice_ends(rounds: int, slices: int) -> list[int]:
    """Round counts after which to pause: `rounds` cut into `slices` near-equal parts (the end of the
    last part is not a pause)."""
    return sorted({round(rounds * k / slices) for k in range(1, max(1, slices))} - {0, rounds})


SLICE_MIN_S = 0.1
"""A paced slice needs no more rounds than cover this many seconds: a training step of 150 ms is
timed one round a slice, not `rounds_per_slice` (the gate's cost, docs/gate.md)."""


def paced_rounds(rounds: int, pacer: Pacer | None, per_call_s: float | None = None) -> int:
    """At least `rounds_per_slice` rounds per slice when paced, or fewer where fewer cover
    SLICE_MIN_S at `per_call_s` (at least one): both sides of `optbench ab` then cut their timing
    into the same number of slices (the pairs) even when their pilots planned different round counts,
    and a fast case's slice median stands on more than one sample."""
    if pacer is None:
        return rounds
    per_slice = max(1, getattr(pacer, "rounds_per_slice", 1))
    if per_call_s is not None and per_call_s > 0:
        per_slice = min(per_slice, max(1, math.ceil(SLICE_MIN_S / per_call_s)))
    return max(rounds, pacer.slices * per_slice)


def warm_calls(call: Callable[[], object], warmup: int) -> float | None:
    """Call `warmup` times untimed for the measurement; returns the median call in seconds (None
    without a call), which sizes the slices of paced timing."""
    samples = time_calls(call, warmup)
    return float(np.median(samples)) if samples else None


def before_rounds(call: Callable[[], object], rounds: int, pacer: Pacer | None) -> Callable[..., None] | None:
    """An untimed hook for before each timed round: before the first round of each slice after the
    first, it pauses (handing the machine over), then calls once untimed so the next timed round does
    not pay for the caches the other side evicted."""
    if pacer is None:
        return None
    ends, started = set(slice_ends(rounds, pacer.slices)), [0]

    def hook(*_: object, **__: object) -> None:
        if started[0] in ends:
            pacer.pause(started[0])
            call()
        started[0] += 1

    return hook


_SETTLE_WINDOW = 3
_SETTLE_GAIN = 0.05


def settled(samples: list[float]) -> bool:
    """True once the last few calls are no longer clearly faster than the few before them.

    First calls of a fresh model on CPU can run 1.5x slower for a second or more (allocator, kernel
    caches); a fixed warm-up time would let that leak into the timed rounds."""
    if len(samples) < 2 * _SETTLE_WINDOW:
        return False
    last = float(np.median(samples[-_SETTLE_WINDOW:]))
    before = float(np.median(samples[-2 * _SETTLE_WINDOW : -_SETTLE_WINDOW]))
    return last >= before * (1 - _SETTLE_GAIN)


def warm_up(call: Callable[[], object], policy: TimingPolicy) -> list[float]:
    """Call until the minimum warm-up time and rounds have passed and the calls have settled (or
    warmup_max_s ran out); return the warm-up samples, which serve as the pilot for plan_rounds."""
    samples: list[float] = []
    started = time.perf_counter()
    while True:
        samples.extend(time_calls(call, 1))
        elapsed = time.perf_counter() - started
        if len(samples) >= policy.max_rounds or elapsed >= policy.warmup_max_s:
            return samples
        if len(samples) >= policy.warmup_rounds and elapsed >= policy.warmup_s and settled(samples):
            return samples


def plan_rounds(pilot: list[float], policy: TimingPolicy) -> int:
    """Rounds needed for the target precision of the median, from the pilot's later half, within budget."""
    tail = np.asarray(pilot[len(pilot) // 2 :] or pilot, dtype=float)
    per_call = float(np.median(tail))
    cv = float(np.std(tail) / np.mean(tail)) if len(tail) > 1 and np.mean(tail) > 0 else 0.0
    needed = math.ceil((_Z95 * _MEDIAN_SE_FACTOR * cv / policy.target_rel_ci) ** 2)
    affordable = int(policy.budget_s / per_call) if per_call > 0 else policy.max_rounds
    return int(min(policy.max_rounds, max(policy.min_rounds, min(needed, affordable))))
