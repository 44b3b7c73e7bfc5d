"""Verdicts per case and metric, from the raw samples of a baseline run and a candidate run.

Latency is judged twice: as latency normalized by the eager fp32 case of the same run (machine
independent, like the speedup column) and, only when the machine fingerprints match, as absolute
latency. A latency change is `regressed` only when a Mann-Whitney test, corrected for the number of
comparisons (Holm or Benjamini-Hochberg), is significant and the change passes the threshold.
Accuracy, size, parameters and memory are compared with a direction and a tolerance."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from optbench.gate.config import GateConfig, Thresholds
from optbench.results.schema import BROKEN, Status
from optbench.results.stats import adjust_p
from optbench.results.values import number as _num

REGRESSED, IMPROVED, UNCHANGED = "regressed", "improved", "unchanged"
NEW, MISSING, NOT_COMPARABLE = "new", "missing", "not_comparable"
IDENTITY = ("model", "technique", "device", "mode", "batch_size", "input_shape", "weights")
"""What makes two rows the same case."""
CODE = ("model_code_hash", "technique_code_hash", "dtype")
"""What, when it changed, makes the numbers of one case incomparable."""
MACHINE_CHANGED = "machine changed"
"""The reason of absolute latency's and peak memory's not_comparable verdicts on another machine."""


@dataclass
class Verdict:
    case_id: str
    metric: str
    verdict: str
    base: float | None = None
    head: float | None = None
    ratio: float | None = None
    """head / base (latency: above 1 is slower)."""
    low: float | None = None
    high: float | None = None
    """95% bootstrap interval of the ratio of medians (latency only)."""
    p_value: float | None = None
    p_adjusted: float | None = None
    reason: str = ""
    ignored: str | None = None
    """Why a regression here is acknowledged (the ignore list); it does not fail the gate."""
    confirmed: bool | None = None
    """Latency regressions (and screened cases) measured again: True when the second measurement
    regressed too, False when it did not (then it does not fail the gate); None: not measured again."""
    screened: bool = False
    """`optbench ab`, latency on pairs: slower at the uncorrected alpha and past the threshold, but not
    significant after correction. Measured again when the budget allows; a regression only if that
    confirms it (optbench/gate/paired.py)."""

    def as_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}


def _key(row: pd.Series) -> tuple[Any, ...]:
    return tuple(None if pd.isna(row.get(k)) else row.get(k) for k in IDENTITY)


def _samples(row: pd.Series) -> np.ndarray:
    values = row.get("samples_ms")
    if values is None or (isinstance(values, float) and math.isnan(values)):
        return np.array([])
    return np.asarray(values, dtype=float)


def _ratio_interval(base: np.ndarray, head: np.ndarray) -> tuple[float, float]:
    from optbench.results.derive import speedup_interval

    low, high = speedup_interval(head, base)  # median(head) / median(base)
    return low, high


def _latency(case_id: str, metric: str, base: np.ndarray, head: np.ndarray, t: Thresholds) -> Verdict:
    if len(base) < t.min_samples or len(head) < t.min_samples:
        return Verdict(
            case_id,
            metric,
            NOT_COMPARABLE,
            reason=f"too few samples ({len(base)} and {len(head)}; need {t.min_samples})",
        )
    ratio = float(np.median(head) / np.median(base))
    low, high = _ratio_interval(base, head)
    p = float(stats.mannwhitneyu(base, head, alternative="two-sided").pvalue)
    return Verdict(
        case_id, metric, UNCHANGED, float(np.median(base)), float(np.median(head)), ratio, low, high, p
    )


def _decide_latency(v: Verdict, t: Thresholds) -> None:
    if v.verdict != UNCHANGED or v.ratio is None or v.p_adjusted is None:
        return
    significant = v.p_adjusted < t.alpha
    slower, faster = 1 + t.latency_pct / 100, 1 / (1 + t.latency_pct / 100)
    if significant and v.ratio > slower:
        v.verdict, v.reason = REGRESSED, f"{(v.ratio - 1) * 100:.1f}% slower (threshold {t.latency_pct:g}%)"
    elif significant and v.ratio < faster:
        # "x% faster" as a speedup (base / head - 1), the same measure the limit below is in
        faster_pct = (1 / v.ratio - 1) * 100
        v.verdict, v.reason = IMPROVED, f"{faster_pct:.1f}% faster"
        limit = t.fail_on_improvement_pct
        if limit is not None and faster_pct > limit:
            v.verdict = REGRESSED
            v.reason += f", more than {limit:g}%: refresh the baseline"
    elif v.ratio > slower or v.ratio < faster:
        v.reason = (
            f"a {abs(v.ratio - 1) * 100:.1f}% change, not significant (p {v.p_adjusted:.3g} after correction)"
        )


def _deterministic(
    case_id: str, metric: str, base: Any, head: Any, tolerance: float, relative: bool
) -> Verdict | None:
    """Higher is worse for size, params and memory (relative tolerance); accuracy is handled apart."""
    b, h = _num(base), _num(head)
    if b is None or h is None:
        return None
    limit = b * (1 + tolerance / 100) if relative else b + tolerance
    ratio = h / b if b else None
    if h > limit:
        return Verdict(
            case_id,
            metric,
            REGRESSED,
            b,
            h,
            ratio,
            reason=f"grew past the {tolerance:g}{'%' if relative else ''} tolerance",
        )
    lower = b * (1 - tolerance / 100) if relative else b - tolerance
    return Verdict(case_id, metric, IMPROVED if h < lower else UNCHANGED, b, h, ratio)


def _accuracy(case_id: str, base: pd.Series, head: pd.Series, t: Thresholds) -> Verdict | None:
    b, h = _num(base.get("top1")), _num(head.get("top1"))
    if head.get("status") == Status.FAIL_ACCURACY and base.get("status") != Status.FAIL_ACCURACY:
        return Verdict(
            case_id, "top1", REGRESSED, b, h, reason=f"below the accuracy floor: {head.get('reason')}"
        )
    if b is None or h is None:
        return None
    if h < b - t.accuracy_drop:
        return Verdict(
            case_id,
            "top1",
            REGRESSED,
            b,
            h,
            reason=f"dropped {(b - h) * 100:.1f} points (tolerance {t.accuracy_drop * 100:g})",
        )
    return Verdict(case_id, "top1", IMPROVED if h > b + t.accuracy_drop else UNCHANGED, b, h)


def _status_change(case_id: str, base: pd.Series, head: pd.Series) -> Verdict | None:
    """A case that stopped working (passed, now broken) regressed, with the candidate's reason; one
    that newly passes improved. None when the status says nothing on its own."""
    before, now = base.get("status"), head.get("status")
    if before == Status.PASSED and now in BROKEN:
        return Verdict(case_id, "status", REGRESSED, reason=f"{now}: {head.get('reason')}")
    if before != Status.PASSED and now == Status.PASSED and before in (*BROKEN, Status.FAIL_ACCURACY):
        why = f"newly passes (was {before}: {base.get('reason')})"
        return Verdict(case_id, "status", IMPROVED, reason=why)
    return None


def _memory(case_id: str, b: pd.Series, h: pd.Series, t: Thresholds) -> list[Verdict]:
    """Peak memory, gated exactly, unless one side made the technique's preparation (a fine-tune's
    autograd memory is in its peak) and the other read it from the cache (measured: 1362 against
    1643 MB for one pruned resnet18 on identical code, as the two sides of `optbench ab` share a
    cache and whichever runs a case first fills it)."""
    # results.load gives the column pandas' boolean dtype: True, False or NA (no preparation)
    cached = [None if pd.isna(r.get("prepare_cached")) else bool(r.get("prepare_cached")) for r in (b, h)]
    if None not in cached and cached[0] != cached[1]:
        side = "the baseline" if cached[0] else "this run"
        why = f"{side} read the technique's preparation from the cache, the other made it (its peak holds it)"
        return [Verdict(case_id, "peak_mem_mb", NOT_COMPARABLE, reason=why)]
    memory = _deterministic(
        case_id, "peak_mem_mb", b.get("peak_mem_mb"), h.get("peak_mem_mb"), t.memory_pct, True
    )
    return [memory] if memory else []


def compare(
    base: pd.DataFrame,
    head: pd.DataFrame,
    config: GateConfig | None = None,
    asked: set[str] | None = None,
) -> list[Verdict]:
    """Every case of either run, every metric it has, with a verdict.

    `asked`: the case ids the candidate's selection asks for (`asked_for`); a case that passed in the
    baseline, is asked for and has no row disappeared: a regression, never merely missing."""
    config = config or GateConfig()
    base_rows = {_key(r): r for _, r in base.iterrows()}
    head_rows = {_key(r): r for _, r in head.iterrows()}
    verdicts: list[Verdict] = []
    latency: list[Verdict] = []
    for key, h in head_rows.items():
        case_id = str(h["case_id"])
        t = config.for_case(case_id)
        b = base_rows.get(key)
        if b is None:
            verdicts.append(Verdict(case_id, "case", NEW, reason="not in the baseline"))
            continue
        # Before the code check: a case that broke has no dtype or numbers left to compare, and a
        # broken case must never read as "not comparable".
        status = _status_change(case_id, b, h)
        if status is not None:
            verdicts.append(status)
            continue
        changed = [c for c in CODE if str(b.get(c)) != str(h.get(c))]
        if changed and h.get("status") == Status.FAIL_ACCURACY and b.get("status") == Status.PASSED:
            verdicts.append(
                Verdict(case_id, "top1", REGRESSED, reason=f"below the accuracy floor: {h.get('reason')}")
            )
            continue
        if changed:
            verdicts.append(Verdict(case_id, "case", NOT_COMPARABLE, reason=f"{', '.join(changed)} changed"))
            continue
        if b.get("status") == h.get("status") != Status.PASSED:  # skipped (or failing) then and now
            verdicts.append(Verdict(case_id, "status", UNCHANGED))
            continue
        if b.get("status") != Status.PASSED or h.get("status") not in (Status.PASSED, Status.FAIL_ACCURACY):
            verdicts.append(
                Verdict(case_id, "status", NOT_COMPARABLE, reason=f"{b.get('status')} -> {h.get('status')}")
            )
            continue
        base_s, head_s = _samples(b), _samples(h)
        if h.get("technique") != "eager":
            nb, nh = _num(b.get("baseline_latency_ms")), _num(h.get("baseline_latency_ms"))
            if nb and nh:
                latency.append(_latency(case_id, "latency_vs_eager", base_s / nb, head_s / nh, t))
        same_machine = str(b.get("machine_fingerprint")) == str(h.get("machine_fingerprint"))
        rb, rh = _num(b.get("reference_ms")), _num(h.get("reference_ms"))
        if rb and rh and same_machine:
            # Normalized by the fixed fp32 workload timed beside each case: cancels a machine of the
            # same kind running slower. Not across kinds: on another ISA a bf16 or int8 case's speed
            # moves against an fp32 matmul by 10x and more.
            latency.append(_latency(case_id, "latency_vs_reference", base_s / rb, head_s / rh, t))
        if same_machine:
            latency.append(_latency(case_id, "latency_ms", base_s, head_s, t))
            verdicts += _memory(case_id, b, h, t)
        else:  # another machine: only speedup against eager, top-1 and size are gated
            why = f"{MACHINE_CHANGED} ({b.get('machine_fingerprint')} -> {h.get('machine_fingerprint')})"
            metrics = ("latency_ms", "peak_mem_mb", *(("latency_vs_reference",) if rb and rh else ()))
            verdicts += [Verdict(case_id, m, NOT_COMPARABLE, reason=why) for m in metrics]
        for metric, tolerance in (("size_compressed_bytes", t.size_pct), ("params", 0.0)):
            found = _deterministic(case_id, metric, b.get(metric), h.get(metric), tolerance, True)
            verdicts += [found] if found else []
        accuracy = _accuracy(case_id, b, h, t)
        verdicts += [accuracy] if accuracy else []
    head_ids = {str(h["case_id"]) for h in head_rows.values()}
    for key, b in base_rows.items():
        if key in head_rows:
            continue
        case_id = str(b["case_id"])
        # Asked for and without a row of that id (a row of that id under another identity is another case)
        if (
            asked is not None
            and case_id in asked
            and case_id not in head_ids
            and b.get("status") == Status.PASSED
        ):
            why = "passed in the baseline; this run's selection asks for it, but it has no row"
            verdicts.append(Verdict(case_id, "case", REGRESSED, reason=f"disappeared: {why}"))
        else:
            verdicts.append(Verdict(case_id, "case", MISSING, reason="in the baseline, not in this run"))
    tested = [v for v in latency if v.p_value is not None]
    for v, adjusted in zip(tested, adjust_p([v.p_value for v in tested], config.correction), strict=True):  # type: ignore[misc]
        v.p_adjusted = adjusted
        _decide_latency(v, config.for_case(v.case_id))
    verdicts += latency
    acknowledge(verdicts, config)
    return sorted(verdicts, key=lambda v: (v.case_id, v.metric))


def acknowledge(verdicts: list[Verdict], config: Any) -> None:
    """Mark the regressions (and the screened cases) the ignore list acknowledges, with its reason.
    `optbench ab` calls it again after its paired test decided the latency verdicts."""
    for v in verdicts:
        if v.verdict == REGRESSED or v.screened:
            v.ignored = config.ignored(v.case_id)


def nothing_gated(verdicts: list[Verdict]) -> str | None:
    """Why these verdicts gate nothing (no case in common, or no case in common could be compared),
    or None. Such a comparison is bad input, never a pass."""
    common = {v.case_id for v in verdicts if v.verdict not in (NEW, MISSING)}
    if not common:
        new = sum(1 for v in verdicts if v.verdict == NEW)
        missing = sum(1 for v in verdicts if v.verdict == MISSING)
        return (
            f"the two runs have no case in common ({new} only in this run, {missing} only in the "
            "baseline): nothing to gate (same models, techniques, devices, batch sizes and shapes?)"
        )
    # a status that stayed the same (skipped then and now) compares no number either
    compared = [
        v
        for v in verdicts
        if v.case_id in common
        and v.verdict != NOT_COMPARABLE
        and not (v.metric == "status" and v.verdict == UNCHANGED)
    ]
    if not compared:
        reasons = sorted({v.reason for v in verdicts if v.case_id in common and v.reason})
        why = "; ".join(reasons[:3]) or "skipped or failed on both sides"
        return f"no case in common could be compared ({len(common)} cases: {why})"
    return None


def failed(verdicts: list[Verdict]) -> list[Verdict]:
    """The regressions that fail the gate: not acknowledged in the ignore list, and not refuted by a
    second measurement."""
    return [v for v in verdicts if v.verdict == REGRESSED and not v.ignored and v.confirmed is not False]


def to_confirm(verdicts: list[Verdict]) -> list[str]:
    """Case ids to measure again: those whose latency regressed and would fail the gate, worst first,
    then the screened ones, worst first (left out, those fail nothing)."""
    flagged = [v for v in failed(verdicts) if v.metric.startswith("latency") and v.ratio is not None]
    flagged.sort(key=lambda v: -(v.ratio or 0.0))
    screened = [v for v in verdicts if v.screened and not v.ignored and v.ratio is not None]
    screened.sort(key=lambda v: -(v.ratio or 0.0))
    return list(dict.fromkeys(v.case_id for v in [*flagged, *screened]))


def apply_confirmation(verdicts: list[Verdict], second: list[Verdict], measured: set[str]) -> None:
    """Mark each latency regression of a case in `measured` confirmed (the second measurement, against
    the same baseline, regressed in the same metric) or not."""
    again = {(v.case_id, v.metric): v for v in second}
    for v in verdicts:
        flagged = v.verdict == REGRESSED or v.screened
        if not flagged or not v.metric.startswith("latency") or v.case_id not in measured:
            continue
        other = again.get((v.case_id, v.metric))
        v.confirmed = other is not None and other.verdict == REGRESSED
        seen = (
            f"ratio {other.ratio:.3g}, {other.verdict}" if other is not None and other.ratio else "no result"
        )
        if v.screened and v.confirmed:  # the fresh sessions' test decides, so the screen may fail
            v.verdict = REGRESSED
        v.reason += f"; measured again: {seen}" + ("" if v.confirmed else " (not confirmed: does not fail)")


NOT_SELECTING = frozenset({"malloc"})
"""Recorded settings that change how a case is timed, never which cases a run asks for: two runs that
differ only there (a baseline from before `--malloc auto`, a runner with LD_PRELOAD) ask for the same."""


def asked_for(base: Any, head: Any) -> set[str] | None:
    """The case ids the candidate run's selection asks for, from the two runs' manifests (`Manifest`
    or None): the candidate's own cases, and the baseline's when both were asked with the same
    selection and the candidate is not one shard. None when the candidate has no manifest."""
    if head is None:
        return None
    asked = set(head.cases)

    def selecting(config: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in config.items() if k not in NOT_SELECTING}

    if base is not None and head.shard is None and selecting(base.config) == selecting(head.config):
        asked |= set(base.cases)
    return asked
