"""`optbench ab`'s confirmation: a latency regression found on the pairs of slices fails the gate only
if a fresh pair of sessions, measuring that case again, finds it too.

Why fresh sessions: on identical code one session can run a case a few percent slower than the other
session for its whole life (where its memory landed, which core its threads settled on). Every pair of
slices then agrees, so the signed-rank test is confident, and no pairing inside one pair of sessions
removes it: in a diagnostic run here, an unchanged case came out 6.8% slower with p = 0.00006. New processes
draw that effect anew, so a real regression shows again and a session effect rarely does twice.

Which cases: the regressions (significant after correction, past the threshold), then the cases the
first test screened (significant before correction only; optbench/gate/paired.py), each worst first,
within the budget. A regression the budget leaves out fails unconfirmed; a screened case left out
stays unchanged. A screened case fails only if the fresh sessions confirm it, by the rule below.

How the two measurements are weighed: the first measurement flagged the case, so it may set the size
of the change but never its significance. The size is the geometric mean of the two measurements'
median paired ratios (each pair of sessions counting once) and must pass the threshold; the
significance is the one-sided signed-rank test on the fresh sessions' pairs alone, corrected over the
cases measured again; and the fresh sessions must lean slower (median ratio above 1). Before, the test
ran on both measurements' pairs together, so the pairs that flagged a case nearly guaranteed its
significance and a first session effect of +10% was confirmed whenever the fresh sessions leaned
slower at all: a coin flip on identical code. No torch here."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from optbench.gate import paired
from optbench.gate.verdicts import REGRESSED, UNCHANGED, Verdict, apply_confirmation, to_confirm


@dataclass
class Plan:
    """Which flagged cases to measure again within the budget."""

    cases: list[str] = field(default_factory=list)
    """Case ids, worst ratio first."""
    items: list[str] = field(default_factory=list)
    """Their test items (pytest node ids)."""
    estimate_s: float = 0.0
    left_out: list[str] = field(default_factory=list)
    """Flagged cases whose re-measurement would not fit the budget: they fail unconfirmed."""
    unscreened: list[str] = field(default_factory=list)
    """Screened cases that would not fit the budget: they stay unchanged."""


def choose(
    verdicts: list[Verdict],
    judged: set[str],
    item_of: dict[str, str],
    item_seconds: dict[str, float],
    start_s: float,
    budget_s: float,
) -> Plan:
    """The flagged latency regressions judged on pairs, worst first, then the screened cases, worst
    first, while the estimated time (the sessions' start plus each item's time in the first
    measurement) stays within `budget_s`."""
    plan = Plan()
    if budget_s <= 0:
        return plan
    screened = {v.case_id for v in verdicts if v.screened}
    estimate = start_s
    for case_id in to_confirm(verdicts):
        item = item_of.get(case_id)
        if case_id not in judged or item is None:
            continue
        cost = 0.0 if item in plan.items else item_seconds.get(item, 0.0)
        if estimate + cost > budget_s:
            (plan.unscreened if case_id in screened else plan.left_out).append(case_id)
            continue
        estimate += cost
        plan.cases.append(case_id)
        if item not in plan.items:
            plan.items.append(item)
    plan.estimate_s = estimate if plan.cases else 0.0
    return plan


def judge(
    verdicts: list[Verdict],
    cases: list[str],
    first: dict[str, list[paired.Pair]],
    pairs: dict[str, list[paired.Pair]],
    config: Any,
) -> dict[str, Verdict]:
    """Judge `cases` on the second measurement's pairs (`pairs`), with the size of the change from
    both (`first` too), as the module says, and mark each first verdict confirmed or not. A case the second measurement
    could not judge (its session crashed, too few pairs) stays unconfirmed-and-failing: only a
    measurement that ran can refute a regression. Returns the second verdicts."""
    from optbench.ab.outcome import GATED

    again = {c: paired.ratios(pairs.get(c, [])) for c in cases}
    measured = [c for c in cases if len(again[c]) >= paired.MIN_PAIRS]
    medians = {c: (_median(paired.ratios(first.get(c, []))), _median(again[c])) for c in measured}

    def both(case_id: str, _: list[float]) -> float:
        one, two = medians[case_id]
        return math.sqrt(one * two) if one > 0 else two

    second = [Verdict(case_id, GATED, UNCHANGED) for case_id in measured]
    fresh = {c: pairs[c] for c in measured}  # significance from the fresh data alone
    judged = paired.decide(second, fresh, config.correction, config.for_case, effect=both)
    for v in second:
        one, two = medians[v.case_id]
        v.reason = f"measured {two:.3g}, first {one:.3g}: {v.reason}"
        if v.verdict == REGRESSED and two <= 1:
            v.verdict = UNCHANGED
            v.reason = f"measured {two:.3g}, first {one:.3g}: the fresh sessions do not lean slower"
    apply_confirmation(verdicts, [v for v in second if v.case_id in judged], judged)
    return {v.case_id: v for v in second if v.case_id in judged}


def _median(ratios: list[float]) -> float:
    return float(np.median(ratios)) if ratios else 0.0
