"""Which technique to deploy, per model, device, mode and input: the fastest one that passed within
the accuracy floor (and a size or memory limit when given), with the runner-up and the margin.

"Faster" is judged with the speedup's interval, not its point value, adjusted for the number of
candidates compared (Bonferroni: each 95% interval widened on the log scale by z(1 - 0.05/2k) /
z(0.975), which assumes the estimate is roughly normal on that scale). Eager fp32 is always the
reference, even when a limit excludes it: the winner's adjusted interval must lie above 1.03 (a gain
of more than optbench.results.derive.MARGIN), and when it overlaps the runner-up's the answer is "no
clear winner". A candidate needs accuracy evidence within the floor (accuracy_verdict "within
floor"); an unclear or unmeasured accuracy rules it out."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

import pandas as pd

from optbench.results.derive import MARGIN
from optbench.results.schema import AccuracyVerdict, Status
from optbench.results.values import number

GROUP = ("model", "device", "mode", "batch_size", "input_shape")
CLEAR = "recommended"
UNCLEAR = "no clear winner"
KEEP_EAGER = "keep eager fp32"
NOTHING = "nothing qualifies"
NO_ACCURACY = "no accuracy evidence"
AT_CHANCE = "fp32 at chance"


@dataclass(frozen=True)
class Limits:
    """What a deployment allows. accuracy_floor None: each row's own floor (its status says)."""

    accuracy_floor: float | None = None
    max_size_mb: float | None = None
    max_memory_mb: float | None = None


@dataclass(frozen=True)
class Candidate:
    technique: str
    speedup: float
    low: float | None
    high: float | None

    def interval(self) -> str:
        if self.low is None or self.high is None:
            return f"{self.speedup:.2f}x"
        return f"{self.speedup:.2f}x [{self.low:.2f}, {self.high:.2f}]"


@dataclass(frozen=True)
class Recommendation:
    model: str
    device: str
    mode: str
    batch_size: int | None
    input_shape: str
    verdict: str
    """recommended, no clear winner, keep eager fp32, nothing qualifies, or no accuracy evidence (the
    fp32 model is at chance on its task, so accuracy rules nothing in or out)."""
    best: Candidate | None
    runner_up: Candidate | None
    reason: str
    excluded: dict[str, list[str]] = field(default_factory=dict)
    """Why techniques were left out: 'failed', 'below accuracy floor', 'over size limit', ..."""
    accuracy_source: str = ""
    """Where the winner's accuracy was measured (the embedded task, or the user's data)."""

    @property
    def technique(self) -> str | None:
        return self.best.technique if self.best else None

    @property
    def margin(self) -> float | None:
        """How much faster the winner is than the runner-up (1.10: 10% faster)."""
        if self.best is None or self.runner_up is None or self.runner_up.speedup <= 0:
            return None
        return self.best.speedup / self.runner_up.speedup


def accuracy_evidence(row: pd.Series) -> str:
    """within, below, unclear or none: what a row shows about accuracy against fp32's. Inference: its
    paired verdict (rows from before it: the point rule on held-out top-1); training: top-1 after the
    short training; a data pipeline feeds the same samples, so its cases lose none. Random weights
    have no labels to score, and an fp32 model at chance has learned nothing to lose: none."""
    mode = str(row.get("mode") or "inference")
    if mode == "data":
        return "within"
    verdict = row.get("accuracy_verdict")
    if verdict == AccuracyVerdict.NO_EVIDENCE:  # fp32 itself at chance: nothing to lose, nothing shown
        return "none"
    if isinstance(verdict, str):
        return {AccuracyVerdict.WITHIN: "within", AccuracyVerdict.BELOW: "below"}.get(verdict, "unclear")
    if number(row.get("converge_top1_delta" if mode == "training" else "top1_delta")) is None:
        return "none"
    return "below" if row.get("status") == Status.FAIL_ACCURACY else "within"


def _exclusion(row: pd.Series, limits: Limits) -> str | None:
    """Why this row cannot be recommended, or None."""
    status = row.get("status")
    if status == Status.FAIL_ACCURACY and limits.accuracy_floor is None:
        return "below accuracy floor"
    if status not in (Status.PASSED, Status.FAIL_ACCURACY):
        return str(status)
    if number(row.get("speedup")) is None:
        return "no speedup"
    evidence = accuracy_evidence(row)
    if limits.accuracy_floor is None and evidence in ("below", "unclear"):
        return "below accuracy floor" if evidence == "below" else "accuracy unclear"
    if row.get("technique") != "eager" and evidence == "none":
        return (
            AT_CHANCE
            if row.get("accuracy_verdict") == AccuracyVerdict.NO_EVIDENCE
            else "accuracy not measured"
        )
    ratio = number(row.get("top1_ratio"))
    if limits.accuracy_floor is not None and ratio is not None and ratio < limits.accuracy_floor:
        return "below accuracy floor"
    size = number(row.get("size_compressed_bytes"))
    if limits.max_size_mb is not None and size is not None and size / 2**20 > limits.max_size_mb:
        return "over size limit"
    memory = number(row.get("peak_mem_mb"))
    if limits.max_memory_mb is not None and memory is not None and memory > limits.max_memory_mb:
        return "over memory limit"
    return None


def _candidate(row: pd.Series) -> Candidate:
    speedup = float(row["speedup"])
    low, high = number(row.get("speedup_ci95_low")), number(row.get("speedup_ci95_high"))
    if row.get("technique") == "eager":
        low = high = 1.0  # the reference itself: exactly 1 by definition
    return Candidate(str(row["technique"]), speedup, low, high)


def _adjusted(c: Candidate, compared: int) -> Candidate:
    """`c`'s interval widened for `compared` candidates (Bonferroni, on the log scale)."""
    if compared <= 1 or c.low is None or c.high is None or c.technique == "eager" or c.speedup <= 0:
        return c
    if c.low <= 0 or math.isnan(c.low) or math.isnan(c.high):
        return c
    widen = NormalDist().inv_cdf(1 - 0.05 / (2 * compared)) / NormalDist().inv_cdf(0.975)
    low = c.speedup * (c.low / c.speedup) ** widen
    high = c.speedup * (c.high / c.speedup) ** widen
    return Candidate(c.technique, c.speedup, low, high)


def _overlap(a: Candidate, b: Candidate) -> bool:
    """True when the intervals overlap, or either has none (then nothing is clear)."""
    if a.low is None or b.high is None:
        return True
    return a.low <= b.high


def recommend_group(rows: pd.DataFrame, limits: Limits) -> Recommendation:
    """The recommendation for one group of rows (one model, device, mode and input)."""
    first = rows.iloc[0]
    excluded: dict[str, list[str]] = {}
    candidates: list[Candidate] = []
    for _, row in rows.iterrows():
        why = _exclusion(row, limits)
        if why is None:
            candidates.append(_candidate(row))
        else:
            excluded.setdefault(why, []).append(str(row["technique"]))
    compared = sum(1 for c in candidates if c.technique != "eager")
    candidates = [_adjusted(c, compared) for c in candidates]
    candidates.sort(key=lambda c: c.speedup, reverse=True)
    best = candidates[0] if candidates else None
    runner = candidates[1] if len(candidates) > 1 else None
    eager = next((c for c in candidates if c.technique == "eager"), Candidate("eager", 1.0, 1.0, 1.0))
    if best is None:
        verdict = NOTHING
        reason = "; ".join(f"{why}: {', '.join(names)}" for why, names in excluded.items()) or "no rows"
    elif best.technique == "eager":
        verdict = KEEP_EAGER
        reason = "no technique was faster than eager fp32 within the limits"
    elif best.low is None or best.low <= 1 + MARGIN:  # eager is the reference even when a limit excludes it
        verdict, runner = UNCLEAR, eager
        reason = (
            f"{best.technique} {best.interval()}: its interval reaches within {MARGIN:.0%} of 1.0, no clear "
            "gain over eager fp32"
        )
    elif runner is not None and _overlap(best, runner):
        verdict = UNCLEAR
        reason = f"{best.technique} {best.interval()} and {runner.technique} {runner.interval()} overlap"
    else:
        verdict = CLEAR
        reason = f"{best.technique} {best.interval()}" + (
            f", ahead of {runner.technique} {runner.interval()}" if runner else ""
        )
    if AT_CHANCE in excluded and (best is None or best.technique == "eager"):
        # "keep eager fp32" would claim nothing is worth it; the truth is that accuracy cannot tell.
        verdict, best, runner = NO_ACCURACY, None, None
        reason = _at_chance_reason(rows, excluded[AT_CHANCE])
    source = ""
    if best is not None and best.technique != "eager":
        found = (
            rows.loc[rows["technique"] == best.technique, "accuracy_source"]
            if "accuracy_source" in rows
            else []
        )
        source = next((str(v) for v in found if isinstance(v, str) and v), "")
        if source.startswith("the embedded task"):
            reason += "; accuracy measured on the embedded task; pass --data-dir to measure it on your data"
    batch = number(first.get("batch_size"))
    return Recommendation(
        model=str(first["model"]),
        device=str(first["device"]),
        mode=str(first.get("mode") or "inference"),
        batch_size=None if batch is None else int(batch),
        input_shape="" if pd.isna(first.get("input_shape")) else str(first.get("input_shape")),
        verdict=verdict,
        best=best,
        runner_up=runner,
        reason=reason,
        excluded=excluded,
        accuracy_source=source,
    )


def _at_chance_reason(rows: pd.DataFrame, techniques: list[str]) -> str:
    """Why nothing is recommended for a model at chance, with the fastest by speed alone."""
    blind = rows[rows["technique"].isin(techniques)]
    speeds = pd.to_numeric(blind["speedup"], errors="coerce")
    fp32 = number(blind["top1_fp32"].iloc[0]) if "top1_fp32" in blind and len(blind) else None
    text = "the fp32 model is at chance on its task" + (f" (top-1 {fp32:.3f})" if fp32 is not None else "")
    text += ", so no technique has accuracy evidence"
    if speeds.notna().any():
        fastest = blind.loc[speeds.idxmax()]
        text += f"; fastest by speed alone: {fastest['technique']} {float(speeds.max()):.2f}x"
    return text + "; measure accuracy on a model that learned (--weights own or pretrained, --data-dir)"


def recommend(frame: pd.DataFrame, limits: Limits | None = None) -> list[Recommendation]:
    """One recommendation per model, device, mode and input shape of a run, in the run's order.
    Eager references measured only for a deselected case (selected False) are candidates too."""
    limits = limits or Limits()
    if frame.empty:
        return []
    keyed = frame.assign(**{c: frame[c].astype(object).where(frame[c].notna(), "") for c in GROUP})
    return [recommend_group(rows, limits) for _, rows in keyed.groupby(list(GROUP), sort=False)]
