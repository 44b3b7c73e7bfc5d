"""Does a training technique still learn? A short seeded training from a fresh initialization, on the
embedded task at its task shape, through the same technique; its final loss and held-out top-1 go in
the row, so "faster but diverged" is visible, and a diverged run gets its own status."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from optbench.catalog.checkpoint_training import recalibrate_batchnorm
from optbench.catalog.techniques import Prepared
from optbench.measure.accuracy import at_chance
from optbench.measure.train_step import train_step
from optbench.results.schema import AccuracyVerdict, Status

DIVERGED = Status.DIVERGED
LAST_LOSSES = 10
"""The final loss is the mean of the last this-many steps' losses (one step's is too noisy)."""


@dataclass(frozen=True)
class Convergence:
    steps: int
    batch_size: int
    final_loss: float
    top1: float | None
    seconds: float

    def columns(self) -> dict[str, Any]:
        return {
            "converge_steps": self.steps,
            "converge_batch_size": self.batch_size,
            "converge_loss": self.final_loss,
            "converge_top1": self.top1,
            "converge_s": self.seconds,
        }


def short_training(
    prepare: Callable[[nn.Module, tuple[torch.Tensor, ...]], Prepared],
    build: Callable[[], nn.Module],
    train: tuple[torch.Tensor, torch.Tensor],
    held_out: tuple[torch.Tensor, torch.Tensor],
    *,
    steps: int,
    batch_size: int,
    lr: float,
    device: torch.device,
    seed: int = 0,
) -> Convergence:
    """`steps` optimizer steps (one-cycle schedule, seeded order, full batches only so compiled and
    accumulated steps see one shape), then BatchNorm statistics recomputed and held-out top-1."""
    from optbench.measure.inference import evaluate

    started = time.perf_counter()
    torch.manual_seed(seed)
    model = build().to(device)
    x, y = train
    batch_size = min(batch_size, len(y))
    prepared = prepare(model, (x[:batch_size].to(device),))
    step = train_step(
        prepared,
        device,
        lr,
        scheduler=lambda opt: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps),
    )
    gen = torch.Generator().manual_seed(seed)
    losses: list[float] = []
    while len(losses) < steps:
        order = torch.randperm(len(y), generator=gen)
        for i in range(0, len(order) - batch_size + 1, batch_size):
            idx = order[i : i + batch_size]
            inputs = prepared.adapt_inputs((x[idx].to(device),))
            losses.append(float(step(inputs, y[idx].to(device))))
            if len(losses) >= steps or not math.isfinite(losses[-1]):
                break
        if losses and not math.isfinite(losses[-1]):
            break
    final = sum(losses[-LAST_LOSSES:]) / len(losses[-LAST_LOSSES:])
    top1 = None
    if math.isfinite(final):
        with torch.no_grad():
            recalibrate_batchnorm(prepared.module, x.to(device), batch_size)
        prepared.module.eval()
        with torch.no_grad():
            logits = evaluate(prepared, held_out[0], batch_size, device)
        top1 = float((logits.argmax(1) == held_out[1]).float().mean())
    return Convergence(len(losses), batch_size, final, top1, time.perf_counter() - started)


def verdict(row: dict[str, Any], baseline: dict[str, Any] | None, classes: int) -> dict[str, Any]:
    """Status and comparison columns of a training row from its short training (and fp32's, the
    same group's eager row): diverged when the loss went non-finite or top-1 stayed at chance; no
    evidence when fp32's own short training stayed at chance (too few steps for the model)."""
    loss, top1 = row.get("converge_loss"), row.get("converge_top1")
    if loss is None:
        return {}
    columns: dict[str, Any] = {}
    base_top1 = baseline.get("converge_top1") if baseline is not None else None
    if base_top1 is not None:
        columns["converge_top1_fp32"] = base_top1
        if top1 is not None:
            columns["converge_top1_delta"] = top1 - base_top1
    if not math.isfinite(loss):
        return {**columns, "status": DIVERGED, "reason": f"training loss became {loss} in the short training"}
    if base_top1 is not None and at_chance(base_top1, classes):
        # fp32 itself learned nothing in so few steps (resnet50 from scratch in 50): a technique at
        # chance too has not diverged, and one that is not shows nothing against it.
        return {
            **columns,
            "accuracy_verdict": AccuracyVerdict.NO_EVIDENCE,
            "accuracy_note": f"eager fp32's short training is itself at chance (top-1 {base_top1:.3f} after "
            f"{baseline.get('converge_steps')} steps): too short to show whether this case still learns; "
            "raise --converge-steps",
        }
    if top1 is not None and at_chance(top1, classes):
        fp32 = (
            f"; eager fp32 reached {base_top1:.3f}" if base_top1 is not None and baseline is not row else ""
        )
        return {
            **columns,
            "status": DIVERGED,
            "reason": f"held-out top-1 {top1:.3f} is at chance ({1 / classes:.2f}) after "
            f"{row.get('converge_steps')} training steps{fp32}",
        }
    return columns
