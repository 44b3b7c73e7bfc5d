"""`optbench ab`'s confirmation: a latency regression found on the pairs of slices fails the gate only
if a fresh pair of sessions, measuring that case again, finds it too.

Why fresh sessions: on identical code one session can run a case a few percent slower than the other
session for its whole life (where its memory landed, which core its threads settled on). Every pair of
slices then agrees, so the signed-rank test is confident, and no pairing inside one pair of sessions
removes it: in a diagnostic run here, an unchanged case came out 6.8% slower with p = 0.00006. New processes
draw that effect anew, so a real regression shows again and a session effect rarely does twice.

How the two measurements are weighed: the size of the change is the geometric mean of the two
measurements' median paired ratios, each pair of sessions counting once; its significance is the
one-sided signed-rank test on both measurements' pairs together, corrected over the cases measured
again; and the second measurement must itself lean slower (median ratio above 1). A session effect of
+6.8% then needs the fresh sessions to come out above +3.2% too, while a real 10% slowdown that one
pair of sessions happened to measure at +2.5% is still confirmed. Measured reason: judging the second
measurement alone against the threshold refuted a calibrated 10% slowdown (1.086, then 1.025: 1.055
together) and so missed 1 of 8 in a live run. On 34 recorded confirmations the rule here changes
two verdicts, both injected slowdowns now confirmed: that one, and a 5% one (1.059, then 1.053). In
77 live runs with it, no A/A run failed and every 10% and 25% slowdown did. No torch here."""

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


def choose(
    verdicts: list[Verdict],
    judged: set[str],
    item_of: dict[str, str],
    item_seconds: dict[str, float],
    start_s: float,
    budget_s: float,
) -> Plan:
    """The flagged latency regressions judged on pairs, worst first, while the estimated time (the
    sessions' start plus each item's time in the first measurement) stays within `budget_s`."""
    plan = Plan()
    if budget_s <= 0:
        return plan
    estimate = start_s
    for case_id in to_confirm(verdicts):
        item = item_of.get(case_id)
        if case_id not in judged or item is None:
            continue
        cost = 0.0 if item in plan.items else item_seconds.get(item, 0.0)
        if estimate + cost > budget_s:
            plan.left_out.append(case_id)
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
    """Judge `cases` on the first measurement's pairs (`first`) and the second's (`pairs`) together,
    as the module says, and mark each first verdict confirmed or not. A case the second measurement
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
    together = {c: first.get(c, []) + pairs[c] for c in measured}
    judged = paired.decide(second, together, config.correction, config.for_case, effect=both)
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
