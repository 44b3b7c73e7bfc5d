"""Speedup and its uncertainty, from the raw per-call samples of a case and its eager baseline."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
from scipy import stats

from optbench.results.stats import bootstrap_interval


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
    return bootstrap_interval((base, case), _ratio_of_means if statistic == "mean" else _ratio_of_medians)


def speedup_columns(
    case_samples_ms: Sequence[float],
    base_samples_ms: Sequence[float] | None,
    batch_size: int | None,
    statistic: str = "median",
) -> dict[str, float]:
    """A row's speedup and throughput columns, from the per-call samples (ms) of its case and of the
    case's eager baseline: `speedup` = statistic(base) / statistic(case) with its 95% interval
    (speedup_interval), and `throughput` = batch_size / statistic(case), items per second (left out
    without a batch size). statistic: "median", or "mean" (data rows: an epoch's time, stalls
    included, is what a pipeline changes). base_samples_ms None: the row is its own baseline, a
    speedup of exactly 1. The runner and `optbench ab`'s pooled rows both derive them here."""
    center = np.mean if statistic == "mean" else np.median
    case_ms = float(center(np.asarray(case_samples_ms, dtype=float)))
    columns: dict[str, float] = {}
    if base_samples_ms is None:
        columns.update(speedup=1.0, speedup_ci95_low=1.0, speedup_ci95_high=1.0)
    else:
        base_ms = float(center(np.asarray(base_samples_ms, dtype=float)))
        low, high = speedup_interval(base_samples_ms, case_samples_ms, statistic)
        columns.update(speedup=base_ms / case_ms, speedup_ci95_low=low, speedup_ci95_high=high)
    if batch_size:
        columns["throughput"] = batch_size / (case_ms / 1e3)
    return columns


MARGIN = 0.03
"""The smallest speedup that counts: within 3% of 1.0 (0.971x to 1.03x) a difference is none a user
would act on, and a ratio moves by a few percent between two processes of the same code on its own
(docs/measurement.md, "What counts as faster"). The paired stop rule (optbench.measure.paired), the
summary's marks and the recommendation all use it."""

FASTER, SLOWER, NO_CLEAR, UNKNOWN = "faster", "slower", "no clear difference", "unknown"


def speed_verdict(low: float | None, high: float | None, margin: float = MARGIN) -> str:
    """The three-way verdict of a speedup's 95% interval against eager fp32: faster when it lies wholly
    above 1 + margin, slower when wholly below 1 / (1 + margin), no clear difference otherwise (it
    reaches into the margin: no gain, or none shown); unknown without an interval."""
    if low is None or high is None or np.isnan(low) or np.isnan(high):
        return UNKNOWN
    return FASTER if low > 1 + margin else SLOWER if high < 1 / (1 + margin) else NO_CLEAR


def clear_difference(low: float | None, high: float | None, margin: float = MARGIN) -> bool | None:
    """False when the interval reaches within `margin` of 1.0 (no clear difference from eager fp32,
    speed_verdict); None if unknown."""
    verdict = speed_verdict(low, high, margin)
    return None if verdict == UNKNOWN else verdict != NO_CLEAR


class _Precision(Protocol):
    """What latency_stats reads of a TimingPolicy (optbench.matrix.profiles)."""

    target_rel_ci: float
    noisy_rel_iqr: float


def median_rel_ci95(samples_s: np.ndarray) -> float:
    """Half-width of the distribution-free 95% CI of the median, relative to the median (NaN under ~6 samples)."""
    med = float(np.median(samples_s))
    if len(samples_s) < 6 or med <= 0:
        return float("nan")
    ci = stats.quantile_test(samples_s, q=med, p=0.5).confidence_interval(0.95)
    return float((ci.high - ci.low) / 2 / med)


def latency_stats(samples_s: list[float], policy: _Precision) -> dict[str, float | int | bool]:
    """The latency columns of a row, in milliseconds, from per-call samples in seconds."""
    x = np.asarray(samples_s, dtype=float)
    q25, q50, q75, p90, p99 = np.percentile(x, [25, 50, 75, 90, 99])
    rel_ci = median_rel_ci95(x)
    rel_iqr = (q75 - q25) / q50 if q50 > 0 else float("inf")
    return {
        "latency_ms_min": float(x.min() * 1e3),
        "latency_ms_median": float(q50 * 1e3),
        "latency_ms_mean": float(x.mean() * 1e3),
        "latency_ms_stddev": float(x.std(ddof=1) * 1e3) if len(x) > 1 else 0.0,
        "latency_ms_iqr": float((q75 - q25) * 1e3),
        "latency_ms_p90": float(p90 * 1e3),
        "latency_ms_p99": float(p99 * 1e3),
        "rounds": len(x),
        "rel_ci95": rel_ci,
        # NaN (too few rounds for a 95% interval) counts as not met.
        "precision_met": bool(rel_ci <= policy.target_rel_ci),
        "noisy": bool(rel_iqr > policy.noisy_rel_iqr),
    }
