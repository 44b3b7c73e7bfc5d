"""Paired latency verdicts for `optbench ab`: base and head time one case in alternating slices, so each
slice k of head has a partner slice k of base measured moments apart under the same conditions.

Each pair of slices is a stratum. The effect is the median over the pairs of head's median over
base's: drift and a noisy neighbour move both members of a pair alike and cancel in the ratio. The
significance test is van Elteren's stratified rank-sum test: a Mann-Whitney comparison inside each
pair, summed over the pairs (weights 1/(n+1), normal approximation), so slow drift between pairs
adds no false difference and every sample counts. (On this project's runs it found a 10% slowdown
where the signed-rank test on the 16 per-pair ratios did not: p 1e-5 against 0.008.) A latency
regression needs that test significant after the suite-wide correction (Holm or Benjamini-Hochberg,
as in `optbench compare`) and the median ratio past the A/B threshold. A base whose optbench cannot
slice its timing gives one stratum per round. No torch here."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats


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


def stratified_p(pairs: list[Pair]) -> float:
    """Two-sided p-value of van Elteren's test: head's samples against base's, ranked within each pair."""
    num = var = 0.0
    for b, h in pairs:
        n, m = len(b), len(h)
        if not n or not m:
            continue
        total = n + m
        ranks = stats.rankdata(np.concatenate([np.asarray(b, float), np.asarray(h, float)]))
        weight = 1.0 / (total + 1)
        num += weight * (float(ranks[n:].sum()) - m * (total + 1) / 2)
        var += weight**2 * n * m * (total + 1) / 12
    if var <= 0:
        return 1.0
    return float(2 * stats.norm.sf(abs(num) / math.sqrt(var)))


def ratio_interval(ratios: list[float], seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median paired ratio."""
    values = np.asarray(ratios, dtype=float)
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(values, size=(2000, len(values)), replace=True), axis=1)
    low, high = np.percentile(medians, [2.5, 97.5])
    return float(low), float(high)


def decide(
    verdicts: list[Any],
    pairs: dict[str, list[Pair]],
    correction: str,
    thresholds: Any,
) -> set[str]:
    """Re-judge each latency verdict whose case has pairs on them: ratio and interval from the pairs'
    ratios, p from the stratified test, corrected over those cases, against the A/B threshold
    (`thresholds(case_id)` gives the case's Thresholds). Returns the case ids so judged."""
    from optbench.gate.verdicts import IMPROVED, REGRESSED, UNCHANGED, _correct

    judged = [v for v in verdicts if ratios(pairs.get(v.case_id, []))]
    p_values = [stratified_p(pairs[v.case_id]) for v in judged]
    for v, p, adjusted in zip(judged, p_values, _correct(p_values, correction), strict=True):
        found = ratios(pairs[v.case_id])
        t = thresholds(v.case_id)
        v.ratio = float(np.median(found))
        v.low, v.high = ratio_interval(found)
        v.p_value, v.p_adjusted = p, adjusted
        slower = 1 + t.ab_latency_pct / 100
        past = sum(r > slower for r in found) if v.ratio >= 1 else sum(r < 1 / slower for r in found)
        evidence = f"{len(found)} pairs, {past} past the {t.ab_latency_pct:g}% threshold"
        significant = adjusted < t.alpha
        if significant and v.ratio > slower:
            v.verdict, v.reason = REGRESSED, f"{(v.ratio - 1) * 100:.1f}% slower ({evidence})"
        elif significant and v.ratio < 1 / slower:
            v.verdict, v.reason = IMPROVED, f"{(1 - v.ratio) * 100:.1f}% faster ({evidence})"
        else:
            v.verdict = UNCHANGED
            change = abs(v.ratio - 1) * 100
            why = "not significant" if not significant else f"within the {t.ab_latency_pct:g}% threshold"
            v.reason = f"a {change:.1f}% change, {why} (p {adjusted:.3g} after correction; {evidence})"
        if math.isnan(v.ratio):
            v.verdict, v.reason = UNCHANGED, "no finite paired ratio"
    return {v.case_id for v in judged}
