"""One optimizer step of a prepared model: forward (under whatever the techniques wrapped around it),
loss, backward, step. Gradient accumulation and loss scaling come from the Prepared."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from optbench.catalog.techniques import Prepared


def make_optimizer(module: nn.Module, lr: float, weight_decay: float = 1e-4) -> torch.optim.Optimizer:
    """AdamW, as the zoo's recipes train: its per-parameter state is part of a step's cost."""
    return torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=weight_decay)


def _chunks(tensor: torch.Tensor, k: int) -> tuple[torch.Tensor, ...]:
    return tuple(tensor.chunk(k)) if k > 1 else (tensor,)


def backward_micro_batches(
    prepared: Prepared,
    inputs: tuple[torch.Tensor, ...],
    targets: torch.Tensor,
    scaler: torch.amp.GradScaler | None = None,
) -> torch.Tensor:
    """Forward and backward over `prepared.micro_batches` equal parts of the batch, each loss divided
    by their number so the summed gradients equal one pass over the whole batch; returns the
    batch's mean loss (detached)."""
    k = prepared.micro_batches
    parts = list(zip(*(_chunks(x, k) for x in inputs), strict=True))
    total = torch.zeros((), device=targets.device)
    for part, target in zip(parts, _chunks(targets, k), strict=True):
        logits = prepared.forward(*part)
        loss = nn.functional.cross_entropy(logits.float(), target) / k
        (scaler.scale(loss) if scaler is not None else loss).backward()
        total += loss.detach()
    return total


@dataclass
class TrainStep:
    """Call it for one step; it returns the step's loss as a tensor (no host sync inside)."""

    prepared: Prepared
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler | None = None
    scheduler: Any = None

    def __call__(self, inputs: tuple[torch.Tensor, ...], targets: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        loss = backward_micro_batches(self.prepared, inputs, targets, self.scaler)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        return loss


def train_step(
    prepared: Prepared, device: torch.device, lr: float, scheduler: Callable[..., Any] | None = None
) -> TrainStep:
    """A TrainStep for `prepared` (its module in train mode), with a fresh optimizer; `scheduler`,
    if given, is called with the optimizer and stepped after each step."""
    prepared.module.train()
    optimizer = make_optimizer(prepared.module, lr)
    scaler = torch.amp.GradScaler(device.type) if prepared.grad_scaler else None
    return TrainStep(prepared, optimizer, scaler, scheduler(optimizer) if scheduler else None)
