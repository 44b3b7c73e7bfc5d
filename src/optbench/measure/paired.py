"""Paired timing against eager: a case and its group's eager fp32 baseline timed in alternating
blocks, in ABBA order, in one process, stopping as soon as the answer is known.

What pairing cancels: drift of the machine's speed over the case (load from a neighbour, frequency
scaling, thermal), order and warm-up effects, because each pair's two blocks run back to back and the
order alternates (A B B A A B ...). What it cannot cancel: an effect that lasts the whole session
(one process's memory layout, say), which only a second session shows (`optbench ab` pairs sessions).

Preparations: the case may be given as several independent preparations of the same technique on
the same weights (two int8-quantized copies, say: their packed weights land in different memory, and
in one process six such copies of the LSTM ran 1.00x to 1.26x). They take turns by pairs of pairs
(preparation k serves pairs 2i and 2i+1 for i = k mod count, one AB and one BA), so each sees both
orders and the interval holds the spread between preparations, not only one preparation's noise.

The speedup is the median of the pairs' ratios (eager block median over case block median). Its
interval is the distribution-free interval of a median from order statistics: it assumes only that
the pairs' ratios are independent draws from one continuous distribution, nothing about its shape.

Looks: the answer is examined at a fixed schedule of pair counts (LOOKS) and each look's interval has
confidence 1 - alpha/len(LOOKS) (Bonferroni), so whichever look the case stops at, its interval
covers the true speedup with probability at least 1 - alpha. A case stops at a look when:
  - `precise`: the interval's half-width is within the target precision of the speedup;
  - `decided`: the interval lies wholly above 1 + MARGIN, wholly below 1 / (1 + MARGIN), or wholly
    within [1 / (1 + MARGIN), 1 + MARGIN] (no difference that matters);
  - `hopeless`: the speedup is at most 1/3 (three times slower than eager): the answer is no;
and at any pair when the time budget is spent, once there are MIN_PAIRS_FOR_INTERVAL pairs (`budget`),
or at the last look (`max_pairs`). A budget stop between looks reports that look-adjusted interval.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from scipy import stats

# A speedup within MARGIN (3%) of 1 is no difference that matters.
from optbench.results.derive import FASTER, MARGIN, SLOWER, speed_verdict

LOOKS = (10, 16, 24, 32, 48, 64, 96)
"""Pair counts at which a case may stop (a fixed schedule: its error rate is known, see above)."""
ALPHA = 0.05
HOPELESS = 1 / 3
"""At or below this speedup a case is hopeless: at least three times slower than eager."""
BLOCK_S = 0.05
"""A block is as many calls as take about this long (one call at least)."""
MIN_PAIRS_FOR_INTERVAL = LOOKS[0]
"""The fewest pairs a case is timed for: the first look, where the adjusted interval first exists."""


@dataclass
class PairedResult:
    case_samples: list[float] = field(default_factory=list)
    """Every timed call of the case, seconds, in order."""
    eager_samples: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    """Per pair: eager block median / case block median (above 1: the case is faster)."""
    preparation_of_pair: list[int] = field(default_factory=list)
    """Per pair: which of the case's preparations was timed (0 when there is one)."""
    stop_reason: str = ""
    speedup: float = math.nan
    low: float = math.nan
    high: float = math.nan
    confidence: float = math.nan
    """The confidence of [low, high] at the look the case stopped at."""

    @property
    def pairs(self) -> int:
        return len(self.ratios)

    def by_preparation(self) -> list[float]:
        """The median of the pairs' ratios of each preparation, in order."""
        count = max(self.preparation_of_pair, default=0) + 1
        return [
            statistics.median(
                [r for r, k in zip(self.ratios, self.preparation_of_pair, strict=True) if k == i]
            )
            for i in range(count)
        ]


def median_interval(values: list[float], confidence: float) -> tuple[float, float, float]:
    """(low, high, achieved confidence): the distribution-free interval of the median from order
    statistics (the sign test's), the narrowest with at least `confidence`; NaNs with too few values."""
    n = len(values)
    ordered = sorted(values)
    best = None
    for k in range(n // 2):  # sorted[k] > median when k or fewer values fall below it, and alike above
        covered = 1 - 2 * float(stats.binom.cdf(k, n, 0.5))
        if covered < confidence:
            break
        best = (ordered[k], ordered[n - 1 - k], covered)
    if best is None or n < MIN_PAIRS_FOR_INTERVAL:
        return math.nan, math.nan, math.nan
    return best


def _block(call: Callable[[], object], calls: int, clock: Callable[[], float]) -> list[float]:
    if calls > 1:
        # One untimed call first: the first call after the other side's block pays for its caches and
        # thread pools (an inductor-compiled block after eager's ran 1.5-3x slower on its first call).
        call()
    out = []
    for _ in range(calls):
        t = clock()
        call()
        out.append(clock() - t)
    return out


def time_paired(
    case: Callable[[], object] | Sequence[Callable[[], object]],
    eager: Callable[[], object],
    per_call_s: float,
    budget_s: float,
    target_rel_ci: float,
    clock: Callable[[], float] = time.perf_counter,
    looks: tuple[int, ...] = LOOKS,
) -> PairedResult:
    """Time `case` against `eager` in ABBA blocks until the answer is known (see the module doc).
    Both are warmed up already; `per_call_s` (the slower of the two per call) sizes the blocks.
    `case` may be a sequence of independent preparations, which take turns (module doc)."""
    cases = [case] if callable(case) else list(case)
    calls = max(1, round(BLOCK_S / max(per_call_s, 1e-9)))
    result = PairedResult()
    confidence = 1 - ALPHA / len(looks)
    started = clock()
    while True:
        j = result.pairs
        k = (j // 2) % len(cases)  # this pair's preparation: one AB pair and one BA pair each turn
        first, second = (cases[k], eager) if j % 2 == 0 else (eager, cases[k])  # A B, B A, A B, ...
        first_block = _block(first, calls, clock)
        second_block = _block(second, calls, clock)
        case_block, eager_block = (first_block, second_block) if j % 2 == 0 else (second_block, first_block)
        result.case_samples += case_block
        result.eager_samples += eager_block
        result.ratios.append(statistics.median(eager_block) / statistics.median(case_block))
        result.preparation_of_pair.append(k)
        n = result.pairs
        # the budget ends a case only once it has an interval (a very slow call gets the first look)
        spent = clock() - started >= budget_s and n >= MIN_PAIRS_FOR_INTERVAL
        if n in looks or spent or n >= looks[-1]:
            result.speedup = statistics.median(result.ratios)
            low, high, result.confidence = median_interval(result.ratios, confidence)
            result.low, result.high = low, high
            if n in looks:
                reason = _decided(result.speedup, low, high, target_rel_ci)
                if reason:
                    result.stop_reason = reason
                    return result
            if n >= looks[-1]:
                result.stop_reason = "max_pairs"
                return result
            if spent:
                result.stop_reason = "budget"
                return result


def _decided(speedup: float, low: float, high: float, target_rel_ci: float) -> str | None:
    if speedup <= HOPELESS:
        return "hopeless"
    if math.isnan(low):
        return None
    if (high - low) / 2 <= target_rel_ci * speedup:
        return "precise"
    if speed_verdict(low, high) in (FASTER, SLOWER) or (low >= 1 / (1 + MARGIN) and high <= 1 + MARGIN):
        return "decided"  # clearly faster or slower (the summary's verdict), or clearly no gain
    return None
