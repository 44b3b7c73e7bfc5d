"""Speedup and its uncertainty, from the raw per-call samples of a case and its eager baseline."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0


def _ratio_of_medians(base: np.ndarray, case: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(base, axis=axis) / np.median(case, axis=axis)


def _ratio_of_means(base: np.ndarray, case: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(base, axis=axis) / np.mean(case, axis=axis)


def speedup_interval(
    base_ms: Sequence[float], case_ms: Sequence[float], statistic: str = "median"
) -> tuple[float, float]:
    """95% bootstrap interval (percentile, seeded) of median(base) / median(case), or of the ratio of
    means with statistic="mean".

    The two cases are resampled independently: they were timed one after the other, not paired."""
    base, case = np.asarray(base_ms, dtype=float), np.asarray(case_ms, dtype=float)
    if len(base) < 2 or len(case) < 2:
        return float("nan"), float("nan")
    result = stats.bootstrap(
        (base, case),
        _ratio_of_means if statistic == "mean" else _ratio_of_medians,
        n_resamples=RESAMPLES,
        confidence_level=CONFIDENCE,
        method="percentile",
        vectorized=True,
        paired=False,
        rng=np.random.default_rng(SEED),
    )
    ci = result.confidence_interval
    return float(ci.low), float(ci.high)


def clear_difference(low: float | None, high: float | None) -> bool | None:
    """False when the interval contains 1.0 (no clear difference from eager fp32); None if unknown."""
    if low is None or high is None or np.isnan(low) or np.isnan(high):
        return None
    return not (low <= 1.0 <= high)
