"""Activation checkpointing (torch.utils.checkpoint): each repeated block of the model keeps only its
input for backward and recomputes its activations there. Less memory, about one more forward pass
of compute."""

from __future__ import annotations

import functools
from typing import Any

from torch import nn
from torch.utils.checkpoint import checkpoint

from optbench.catalog.models import ModelSpec
from optbench.catalog.techniques.base import TRAINING, NotApplicable, Prepared, Technique, register_technique
from optbench.catalog.techniques.context import TechniqueContext

MIN_BLOCKS = 2


def repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The blocks to checkpoint: children of each Sequential or ModuleList whose children all have
    submodules of their own (ResNet's stages' blocks, a transformer's layers, EfficientNet's
    stages), outermost first; nothing inside a chosen block is chosen again."""
    chosen: list[nn.Module] = []
    inside: set[int] = set()
    for module in model.modules():
        if id(module) in inside or not isinstance(module, (nn.Sequential, nn.ModuleList)):
            continue
        children = list(module.children())
        if len(children) >= MIN_BLOCKS and all(any(True for _ in c.children()) for c in children):
            chosen += children
            inside.update(id(m) for c in children for m in c.modules())
    return chosen


def _checkpointed(forward: Any) -> Any:
    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        # use_reentrant=False: the variant PyTorch recommends; it supports kwargs and torch.compile.
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    return run


@register_technique
class ActivationCheckpoint(Technique):
    name = "activation_checkpoint"
    family = "training"
    modes = frozenset({TRAINING})
    api = "torch.utils.checkpoint (use_reentrant=False)"
    description = "recompute each repeated block's activations in backward instead of storing them"

    def supports(self, spec: ModelSpec, device: str, mode: str) -> str | None:
        reason = super().supports(spec, device, mode)
        if reason is None and "rnn" in spec.tags:
            return "an LSTM has no repeated blocks to checkpoint (its time steps run inside one kernel)"
        return reason

    def apply(self, prepared: Prepared, ctx: TechniqueContext) -> Prepared:
        blocks = repeated_blocks(prepared.module)
        if len(blocks) < MIN_BLOCKS:
            raise NotApplicable(f"{ctx.spec.name} has no repeated blocks to checkpoint")
        for block in blocks:
            # The instance attribute shadows the class's forward, so nn.Module.__call__ (and its
            # hooks) still run, around the checkpointed forward.
            block.forward = _checkpointed(block.forward)  # type: ignore[method-assign]
        return prepared.then(self.api, columns={"checkpointed_blocks": len(blocks)})
