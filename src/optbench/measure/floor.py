"""Accuracy, fidelity to fp32 and the status they imply, from a case's held-out logits."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from optbench.measure import accuracy
from optbench.results.schema import AccuracyVerdict, Status

ACCURACY_STATUSES = (
    Status.FAIL_ACCURACY,
    Status.NAN_OUTPUT,
    Status.NONDETERMINISTIC_BASELINE,
    Status.DIVERGED,
)
"""Statuses about the numbers a model computes; `--record-accuracy-only` keeps them from failing."""


@dataclass
class Reference:
    """The eager fp32 model's held-out logits, which every technique of its group is compared with."""

    logits: torch.Tensor
    deterministic: bool


def judge(
    logits: torch.Tensor | None,
    labels: torch.Tensor | None,
    nonfinite: bool,
    reference: Reference | None,
    floor: float,
    floor_points: float | None = None,
) -> dict[str, Any]:
    """Quality columns, plus `status` and `reason` when the numbers fail the case.

    `reference` is the group's eager fp32 logits (None for the eager case itself, whose own
    determinism the caller has judged). The floor is relative (`floor` x fp32 top-1) or, with
    `floor_points`, an absolute drop in points. The verdict comes from the paired interval of the
    top-1 change on the same samples: within the floor when it lies above it, below when it lies
    below (fail_accuracy), unclear when it straddles it."""
    if nonfinite or (logits is not None and accuracy.has_nonfinite(logits)):
        return {"status": Status.NAN_OUTPUT, "reason": "the model's outputs contain NaN or inf"}
    if logits is None or labels is None:
        return {}
    columns: dict[str, Any] = {
        "top1": accuracy.topk_accuracy(logits, labels, 1),
        "top5": accuracy.topk_accuracy(logits, labels, 5),
    }
    if reference is None:
        return columns
    # Compare on the samples both saw (an --eval-samples limit keeps a prefix of the split).
    ref_logits = reference.logits[: len(logits)]
    ref_top1 = accuracy.topk_accuracy(ref_logits, labels, 1)
    top1 = columns["top1"]
    columns.update(
        top1_fp32=ref_top1,
        top1_delta=top1 - ref_top1,
        top1_ratio=top1 / ref_top1 if ref_top1 > 0 else float("nan"),
        accuracy_floor=floor,
        **accuracy.fidelity(logits, ref_logits),
    )
    columns.update(_paired(logits, ref_logits, labels, ref_top1, floor, floor_points))
    classes = logits.shape[1]
    if accuracy.at_chance(ref_top1, classes):
        # A model that learned nothing loses nothing to compression: "within floor" would be false
        # evidence, and a recommendation would take the most damaging technique as free.
        columns["accuracy_verdict"] = AccuracyVerdict.NO_EVIDENCE
        columns["accuracy_note"] = (
            f"fp32 top-1 {ref_top1:.3f} is at chance ({1 / classes:.2f} for {classes} classes): the "
            "model learned nothing on this task, so its accuracy change says nothing about the technique"
        )
        return columns
    if columns["accuracy_verdict"] == AccuracyVerdict.BELOW:
        columns["status"] = Status.FAIL_ACCURACY
        below = (
            f"fp32 top-1 {ref_top1:.4f} minus {floor_points:g} points"
            if floor_points is not None
            else (f"{floor:g} x fp32 top-1 {ref_top1:.4f}")
        )
        columns["reason"] = (
            f"top-1 {top1:.4f} is below {below}: the change {columns['top1_delta']:+.4f} "
            f"[{columns['top1_delta_ci95_low']:+.4f}, {columns['top1_delta_ci95_high']:+.4f}] lies below "
            f"the floor {columns['accuracy_floor_delta']:+.4f} (agreement with fp32 {columns['agreement']:.4f})"
        )
    return columns


def _paired(
    logits: torch.Tensor,
    ref_logits: torch.Tensor,
    labels: torch.Tensor,
    ref_top1: float,
    floor: float,
    floor_points: float | None,
) -> dict[str, Any]:
    """The paired interval of the top-1 change and of the agreement with fp32, and the verdict."""
    from optbench.results.stats import paired_difference_interval, proportion_interval

    predicted, ref_predicted = logits.argmax(1), ref_logits.argmax(1)
    right, ref_right = predicted == labels, ref_predicted == labels
    n = len(labels)
    better, worse = int((right & ~ref_right).sum()), int((~right & ref_right).sum())
    low, high = paired_difference_interval(better, worse, n)
    limit = -floor_points / 100 if floor_points is not None else -(1 - floor) * ref_top1
    delta = (better - worse) / n if n else float("nan")
    agree = int((predicted == ref_predicted).sum())
    agree_low, agree_high = proportion_interval(agree, n)
    columns: dict[str, Any] = {
        "top1_delta_ci95_low": low,
        "top1_delta_ci95_high": high,
        "accuracy_floor_delta": limit,
        "agreement_ci95_low": agree_low,
        "agreement_ci95_high": agree_high,
    }
    if math.isnan(low) or low >= limit:
        columns["accuracy_verdict"] = AccuracyVerdict.WITHIN
    elif high < limit:
        columns["accuracy_verdict"] = AccuracyVerdict.BELOW
    else:
        columns["accuracy_verdict"] = AccuracyVerdict.UNCLEAR
        half, gap = (high - low) / 2, abs(delta - limit)
        if gap > 0:  # the half-width shrinks as 1/sqrt(n): about n (half/gap)^2 samples decide it
            more = max(1, math.ceil(n * (half / gap) ** 2) - n)
            columns["accuracy_note"] = (
                f"the change {delta:+.4f} [{low:+.4f}, {high:+.4f}] straddles the floor {limit:+.4f}: "
                f"about {more} more held-out samples would decide it"
            )
        else:
            columns["accuracy_note"] = (
                f"the change {delta:+.4f} sits on the floor: no sample count decides it"
            )
    return columns
