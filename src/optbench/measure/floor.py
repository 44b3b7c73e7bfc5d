"""Accuracy, fidelity to fp32 and the status they imply, from a case's held-out logits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from optbench.measure import accuracy
from optbench.results.schema import Status

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
) -> dict[str, Any]:
    """Quality columns, plus `status` and `reason` when the numbers fail the case.

    `reference` is the group's eager fp32 logits (None for the eager case itself, whose own
    determinism the caller has judged)."""
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
    if not accuracy.accuracy_ok(top1, ref_top1, floor):
        columns["status"] = Status.FAIL_ACCURACY
        columns["reason"] = (
            f"top-1 {top1:.4f} is below {floor:g} x fp32 top-1 {ref_top1:.4f} "
            f"(delta {columns['top1_delta']:+.4f}, agreement with fp32 {columns['agreement']:.4f})"
        )
    return columns
