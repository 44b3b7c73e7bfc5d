"""The statistics the derived columns and the gate share: one seeded percentile bootstrap and one
multiple-comparison correction. No torch."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0


def bootstrap_interval(
    samples: Sequence[Sequence[float] | np.ndarray],
    statistic: Callable[..., np.ndarray],
    *,
    paired: bool = False,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> tuple[float, float]:
    """The percentile-bootstrap interval (seeded, so the same samples give the same interval) of
    `statistic` over one or more samples. `statistic(*samples, axis=-1)` is vectorized, as numpy's
    reductions are; with several samples they are resampled independently unless `paired`."""
    data = tuple(np.asarray(s, dtype=float) for s in samples)
    result = stats.bootstrap(
        data,
        statistic,
        n_resamples=resamples,
        confidence_level=confidence,
        method="percentile",
        vectorized=True,
        paired=paired,
        rng=np.random.default_rng(seed),
    )
    ci = result.confidence_interval
    return float(ci.low), float(ci.high)


def adjust_p(p_values: Sequence[float], method: str) -> list[float]:
    """Adjusted p-values over one family of tests: "bh" (Benjamini-Hochberg, false discovery rate),
    else Holm's step-down (family-wise error). The gate's config admits only "holm" and "bh"."""
    if len(p_values) == 0:
        return []
    if method == "bh":
        return [
            float(p) for p in stats.false_discovery_control(np.asarray(p_values, dtype=float), method="bh")
        ]
    order = np.argsort(p_values)
    m = len(p_values)
    adjusted = np.empty(m)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return [float(p) for p in adjusted]


def paired_difference_interval(
    better: int, worse: int, samples: int, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """Interval of the change in a rate between two classifiers judged on the same `samples`, from
    the discordant pairs: `better` samples only the first gets right, `worse` only the second. Given
    the number of discordant samples d, `better` is binomial(d, q) and the change is (2q - 1) d / n;
    the exact (Clopper-Pearson) interval of q gives it. Assumes independent samples; conditions on d.
    With no discordant sample the change is exactly 0."""
    discordant = better + worse
    if samples <= 0:
        return float("nan"), float("nan")
    if discordant == 0:
        return 0.0, 0.0
    ci = stats.binomtest(better, discordant).proportion_ci(confidence, method="exact")
    scale = discordant / samples
    return float((2 * ci.low - 1) * scale), float((2 * ci.high - 1) * scale)


def proportion_interval(successes: int, trials: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval of a rate; assumes independent trials."""
    if trials <= 0:
        return float("nan"), float("nan")
    ci = stats.binomtest(successes, trials).proportion_ci(confidence, method="exact")
    return float(ci.low), float(ci.high)
