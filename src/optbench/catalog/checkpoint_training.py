"""Train a zoo model on its task's train split until it reaches its recipe's held-out top-1."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn

from optbench.catalog.hardware import train_autocast
from optbench.catalog.models import ModelSpec
from optbench.catalog.tasks.base import TaskData

TRAIN_SEED = 0


@dataclass(frozen=True)
class TrainResult:
    top1: float
    epochs: int
    seconds: float
    reached_target: bool
    target_top1: float | None = None
    """The recipe's target; None where the task sets the training length instead."""


def train_code_hash() -> str:
    """Hash of this file: part of the cache key of every checkpoint and fine-tune it trains."""
    from optbench.catalog.models import file_hash

    return file_hash(__file__)


def training_layout(spec: ModelSpec, model: nn.Module, x: torch.Tensor) -> torch.memory_format:
    """The layout to train `model` in on the CPU, after moving it there: channels_last for a
    convolutional network (read from its layers; not the ViT, not the text models) on 4-D inputs
    whose forward takes it, else the default. oneDNN's NHWC kernels ran MobileNetV3-Large's training
    step at 32x32 2.5 times as fast as NCHW (101 against 252 ms a step of 64) and resnet18's 1.2
    times (158 against 194 ms) on this project's Zen 4 (docs/accuracy.md). A forward that cannot
    (`x.view(n, -1)` after the convolutions, say) is seen in one eval-mode probe on two samples,
    which changes no state, and trains in the default layout as before."""
    from optbench.catalog.compression import structure

    found = structure(spec)
    if (
        x.dim() != 4
        or found.error is not None
        or not found.convolutions
        or found.attention
        or found.recurrent
    ):
        return torch.contiguous_format
    was_training = model.training
    model.to(memory_format=torch.channels_last).eval()
    try:
        with torch.no_grad():
            model(x[:2].contiguous(memory_format=torch.channels_last))
    except RuntimeError:
        model.to(memory_format=torch.contiguous_format)
        return torch.contiguous_format
    finally:
        model.train(was_training)
    return torch.channels_last


@torch.inference_mode()
def predict(forward: Any, x: torch.Tensor, batch_size: int = 256) -> torch.Tensor:
    """Logits for all of `x`, in batches, as float32 on the CPU."""
    outs = [forward(x[i : i + batch_size]).float().cpu() for i in range(0, len(x), batch_size)]
    return torch.cat(outs)


def recalibrate_batchnorm(model: nn.Module, x: torch.Tensor, batch_size: int) -> None:
    """Recompute BatchNorm running statistics over the train split. MobileNetV3 and EfficientNet use
    BN momentum 0.01, so after a few hundred steps their running stats still mostly hold the
    initial values and eval-mode accuracy sits at chance though training accuracy is high."""
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        batches = [x[i : i + batch_size] for i in range(0, len(x), batch_size)]
        torch.optim.swa_utils.update_bn(batches, model)


def train(
    spec: ModelSpec, task: TaskData, seed: int = TRAIN_SEED, progress: bool = True
) -> tuple[nn.Module, TrainResult]:
    """Seeded, CPU-deterministic training; returns the model (eval mode) and how it went."""
    from optbench.progress import progress_bar

    recipe = spec.recipe
    if task.epochs is not None:  # the task sets the training length; no target top-1 stops it early
        recipe = replace(recipe, max_epochs=recipe.task_epochs or task.epochs, target_top1=float("inf"))
    torch.manual_seed(seed)
    model = spec.build_model()
    layout = training_layout(spec, model, task.train_x)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    train_x, train_y = task.train_x[: recipe.train_samples], task.train_y[: recipe.train_samples]
    if len(train_y) == 0:
        raise ValueError(
            f"{task.name} has no train split to train {spec.name} on (give DIR/train/<class>/...)"
        )
    steps_per_epoch = -(-len(train_y) // recipe.batch_size)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=recipe.lr, total_steps=recipe.max_epochs * steps_per_epoch
    )
    loss_fn = nn.CrossEntropyLoss()
    dtype = train_autocast(recipe.autocast)
    autocast_dtype = getattr(torch, dtype) if dtype else None
    gen = torch.Generator().manual_seed(seed)
    started = time.perf_counter()
    top1, epoch = 0.0, 0
    bar = progress_bar(
        recipe.max_epochs * steps_per_epoch,
        f"training {spec.name}",
        enabled=progress,
        unit="step",
        leave=True,
    )
    for epoch in range(1, recipe.max_epochs + 1):
        if recipe.fresh_views and task.train_views is not None and epoch > 1:
            train_x = task.train_views(epoch - 1)[: recipe.train_samples]
        model.train()
        order = torch.randperm(len(train_y), generator=gen)
        for i in range(0, len(order), recipe.batch_size):
            idx = order[i : i + recipe.batch_size]
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(
                "cpu", dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None
            ):
                loss = loss_fn(model(train_x[idx].contiguous(memory_format=layout)), train_y[idx])
            loss.backward()
            if recipe.clip_grad_norm:
                nn.utils.clip_grad_norm_(model.parameters(), recipe.clip_grad_norm)
            optimizer.step()
            scheduler.step()
            bar.update(1)
            bar.set_postfix(epoch=epoch, loss=f"{loss.item():.3f}", top1=f"{top1:.3f}", refresh=False)
        recalibrate_batchnorm(model, train_x, recipe.batch_size)
        model.eval()
        top1 = float((predict(model, task.eval_x).argmax(1) == task.eval_y).float().mean())
        bar.set_postfix(epoch=epoch, top1=f"{top1:.3f}")
        if top1 >= recipe.target_top1:
            break
    bar.close()
    model = model.to(memory_format=torch.contiguous_format)
    result = TrainResult(
        top1=top1,
        epochs=epoch,
        seconds=time.perf_counter() - started,
        reached_target=task.epochs is not None or top1 >= recipe.target_top1,
        target_top1=None if task.epochs is not None else recipe.target_top1,
    )
    return model.eval(), result
