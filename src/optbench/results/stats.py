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
