"""`optbench ab`'s confirmation: a latency regression found on the pairs of slices fails the gate only
if a fresh pair of sessions, measuring that case again, finds it too.

Why fresh sessions: on identical code one session can run a case a few percent slower than the other
session for its whole life (where its memory landed, which core its threads settled on). Every pair of
slices then agrees, so the signed-rank test is confident, and no pairing inside one pair of sessions
removes it: in a diagnostic run here, an unchanged case came out 6.8% slower with p = 0.00006. New processes
draw that effect anew, so a real regression shows again and a session effect rarely does twice. The
second measurement is judged alone, by the same rule (paired.decide), corrected over the cases
measured again. No torch here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from optbench.gate import paired
from optbench.gate.verdicts import UNCHANGED, Verdict, apply_confirmation, to_confirm


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
    verdicts: list[Verdict], cases: list[str], pairs: dict[str, list[paired.Pair]], config: Any
) -> dict[str, Verdict]:
    """Judge the second measurement's pairs of `cases` and mark each first verdict confirmed or not.
    A case the second measurement could not judge (its session crashed, too few pairs) stays
    unconfirmed-and-failing: only a measurement that ran can refute a regression. Returns the second
    verdicts."""
    from optbench.gate.ab import GATED

    second = [Verdict(case_id, GATED, UNCHANGED) for case_id in cases]
    judged = paired.decide(second, pairs, config.correction, config.for_case)
    apply_confirmation(verdicts, [v for v in second if v.case_id in judged], judged)
    return {v.case_id: v for v in second if v.case_id in judged}
