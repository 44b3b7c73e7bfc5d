"""Paired latency verdicts for `optbench ab`: base and head time one case in alternating slices, so each
slice k of head has a partner slice k of base measured moments apart under the same conditions.

The pair of slices is the unit. The effect is the median over the pairs of head's median over
base's: drift and a noisy neighbour move both members of a pair alike and cancel in the ratio. Its
significance is the one-sided Wilcoxon signed-rank test on the pairs' log ratios (exact for small
counts): "head is slower" for a regression, "head is faster" for an improvement, each family corrected
over the judged cases on its own (Holm or Benjamini-Hochberg, as in `optbench compare`). A latency
regression needs its test significant after correction and the median ratio past the A/B threshold.

The screen (`optbench ab` only): a case whose test is significant at alpha before correction, with the
ratio past the threshold, but not after, is measured again like a regression (optbench/ab/
confirmation.py) and fails only if the fresh sessions' own test, corrected over the cases measured
again, confirms it. That keeps the family-wise error at alpha: the fresh pairs are new data, whatever
chose the cases. It exists because the correction over the whole selection was the first test's
main cost in power: 10% slower training steps with p 0.0026 to 0.0055 on their pairs missed the gate
(Holm over 8 to 24 cases), where a fresh pair of sessions alone has the power to catch them.

Why one-sided, per direction: only a regression fails the gate, so the error to control is calling
an unchanged case slower. A two-sided test spent half of alpha on the other direction, and a case that
came out faster (a session effect on an unchanged case, common here) entered the correction of the
slower ones: in 77 measured runs a 25% slowdown with 15 of 16 pairs past 1.17 was missed that way
(two-sided p 0.0042, times 3 by Holm).

Why not a rank test on every sample, stratified by pair (van Elteren's)? It has far more power, but a
noise burst moves all samples of one slice together, so they are not independent: on identical code
here it gave p = 0.0001 where the signed-rank test gave 0.009, and in simulation it fell below 0.01
on 16% of identical cases. No torch here."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import stats

from optbench.results.stats import adjust_p, bootstrap_interval


def split(samples: list[float], ends: list[int]) -> list[list[float]]:
    """The samples of each slice, given the sample counts at which the timer paused."""
    bounds = [0, *[e for e in ends if 0 < e < len(samples)], len(samples)]
    return [samples[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


Pair = tuple[list[float], list[float]]
"""(base's samples, head's samples) of one pair of slices (or of one round)."""


def pair_slices(
    base: list[float], base_ends: list[int], head: list[float], head_ends: list[int]
) -> list[Pair]:
    """The pairs of slices of one case and round ([] when the two sides were not sliced alike)."""
    b, h = split(base, base_ends), split(head, head_ends)
    if len(b) < 2 or len(b) != len(h):
        return []
    return list(zip(b, h, strict=True))


def ratios(pairs: list[Pair]) -> list[float]:
    """head's median over base's, pair by pair."""
    return [float(np.median(h) / np.median(b)) for b, h in pairs if len(b) and len(h) and np.median(b) > 0]


MIN_PAIRS = 6
"""Cases with fewer pairs of slices keep the pooled verdict (too few to judge on pairs at all)."""


def min_pairs(alpha: float, cases: int) -> int:
    """The fewest pairs with which a regression of one case among `cases` can still be significant.

    The one-sided exact signed-rank test's smallest p-value with n pairs is 1 / 2**n (every pair leans
    the same way); Holm multiplies the smallest p by the number of cases, and Benjamini-Hochberg does
    the same when only one case regressed. So n must satisfy cases / 2**n < alpha."""
    return math.floor(math.log2(max(cases, 1) / alpha)) + 1


def signed_rank_p(found: list[float], alternative: str = "two-sided") -> float:
    """Wilcoxon signed-rank p-value of the pairs' log ratios against no change; `alternative`
    "greater" tests head slower, "less" head faster."""
    logs = np.log(np.asarray(found, dtype=float))
    if len(logs) == 0 or not np.any(logs):
        return 1.0
    return float(stats.wilcoxon(logs, alternative=alternative).pvalue)


def ratio_interval(ratios: list[float], seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median paired ratio (the pairs are the resampled unit)."""
    return bootstrap_interval((ratios,), np.median, seed=seed)


def decide(
    verdicts: list[Any],
    pairs: dict[str, list[Pair]],
    correction: str,
    thresholds: Any,
    effect: Callable[[str, list[float]], float] | None = None,
    screen: bool = False,
) -> set[str]:
    """Re-judge each latency verdict whose case has at least MIN_PAIRS pairs of slices on them: ratio,
    interval and p from the pairs' ratios, corrected over those cases, against the A/B threshold
    (`thresholds(case_id)` gives the case's Thresholds). `effect(case_id, ratios)` replaces the median
    ratio as the size of the change (the confirmation weighs two measurements equally). With `screen`,
    an unchanged case slower at the uncorrected alpha and past the threshold is marked screened (to
    measure again). Returns the case ids so judged; the others keep their verdict."""
    from optbench.gate.verdicts import IMPROVED, REGRESSED, UNCHANGED

    judged = [v for v in verdicts if len(ratios(pairs.get(v.case_id, []))) >= MIN_PAIRS]
    found_by_case = [ratios(pairs[v.case_id]) for v in judged]
    # Each direction is its own family of claims, corrected on its own.
    slower_p = [signed_rank_p(found, "greater") for found in found_by_case]
    faster_p = [signed_rank_p(found, "less") for found in found_by_case]
    slower_adjusted, faster_adjusted = adjust_p(slower_p, correction), adjust_p(faster_p, correction)
    for i, (v, found) in enumerate(zip(judged, found_by_case, strict=True)):
        t = thresholds(v.case_id)
        v.ratio = float(effect(v.case_id, found) if effect else np.median(found))
        v.low, v.high = ratio_interval(found)
        up = v.ratio >= 1  # the direction the pairs lean: its test is the one reported
        p, adjusted = (slower_p[i], slower_adjusted[i]) if up else (faster_p[i], faster_adjusted[i])
        v.p_value, v.p_adjusted = p, adjusted
        slower = 1 + t.ab_latency_pct / 100
        past = sum(r > slower for r in found) if up else sum(r < 1 / slower for r in found)
        evidence = f"{len(found)} pairs, {past} past the {t.ab_latency_pct:g}% threshold"
        significant = adjusted < t.alpha
        direction = "slower" if up else "faster"
        if significant and v.ratio > slower:
            v.verdict, v.reason = REGRESSED, f"{(v.ratio - 1) * 100:.1f}% slower ({evidence})"
        elif significant and v.ratio < 1 / slower:
            v.verdict, v.reason = IMPROVED, f"{(1 - v.ratio) * 100:.1f}% faster ({evidence})"
        else:
            v.verdict = UNCHANGED
            change = abs(v.ratio - 1) * 100
            why = "not significant" if not significant else f"within the {t.ab_latency_pct:g}% threshold"
            v.reason = (
                f"a {change:.1f}% change, {why} (one-sided p {adjusted:.3g} for {direction} after "
                f"correction; {evidence})"
            )
            if screen and up and p < t.alpha and v.ratio > slower:
                v.screened = True
                v.reason += f"; screened (p {p:.3g} before correction): measured again if the budget allows"
        if math.isnan(v.ratio):
            v.verdict, v.reason = UNCHANGED, "no finite paired ratio"
    return {v.case_id for v in judged}
