"""Task accuracy and fidelity to the fp32 model, from logits."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

CHANCE_MARGIN = 0.05
"""Top-1 within this of chance (1 / classes) counts as having learned nothing."""


def at_chance(top1: float, classes: int) -> bool:
    """True when `top1` is no better than guessing among `classes` (within CHANCE_MARGIN)."""
    return top1 <= 1 / classes + CHANCE_MARGIN


def topk_accuracy(logits: torch.Tensor, labels: torch.Tensor, k: int) -> float:
    if k > logits.shape[1]:
        return float("nan")
    if k == 1:
        # argmax, as the paired interval and the agreement read predictions: with tied logits (bf16
        # rounds many to one value) topk may pick another of the tied classes.
        return float((logits.argmax(1) == labels).float().mean())
    top = logits.topk(k, dim=1).indices
    return float((top == labels[:, None]).any(dim=1).float().mean())


def fidelity(logits: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    """How closely `logits` follow the fp32 model's `reference` logits on the same inputs."""
    logits, reference = logits.double(), reference.double()
    diff = (logits - reference).abs()
    return {
        "agreement": float((logits.argmax(1) == reference.argmax(1)).double().mean()),
        "max_abs_error": float(diff.max()),
        "mean_abs_error": float(diff.mean()),
        "cosine_similarity": float(F.cosine_similarity(logits, reference, dim=1).mean()),
    }


def has_nonfinite(logits: torch.Tensor) -> bool:
    return not bool(torch.isfinite(logits).all())


def baseline_is_deterministic(first: torch.Tensor, second: torch.Tensor) -> bool:
    """fp32 eager run twice on the same inputs must give the same predictions and near-equal logits
    (tiny float noise from threaded reductions is allowed; a changed prediction is not)."""
    if not torch.equal(first.argmax(1), second.argmax(1)):
        return False
    scale = max(float(first.abs().max()), 1e-12)
    return float((first - second).abs().max()) <= 1e-4 * scale


def accuracy_ok(top1: float, reference_top1: float, floor: float) -> bool:
    """MLPerf-style rule: at least `floor` (0.99 by default) of the fp32 reference's top-1."""
    if math.isnan(top1) or math.isnan(reference_top1):
        return True  # nothing to judge: no labels that fit the model
    return top1 >= floor * reference_top1
