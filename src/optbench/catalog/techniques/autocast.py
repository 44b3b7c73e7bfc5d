"""Mixed precision through torch.autocast: bf16 (CPU and CUDA) and fp16 (CUDA AMP)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from optbench.catalog.models import ModelSpec
from optbench.catalog.techniques.base import INFERENCE, TRAINING, Prepared, Technique, register_technique
from optbench.catalog.techniques.context import TechniqueContext


def _autocast_forward(
    forward: Callable[..., Any], device_type: str, dtype: torch.dtype
) -> Callable[..., Any]:
    def autocast_forward(*inputs: Any) -> Any:
        # The context is entered on every call, as user code would: its cost belongs to the technique.
        with torch.autocast(device_type=device_type, dtype=dtype):
            return forward(*inputs)

    return autocast_forward


@register_technique
class Bf16Autocast(Technique):
    name = "bf16_autocast"
    family = "precision"
    hardware = ("bf16",)
    devices = frozenset({"cpu", "cuda", "mps"})
    api = "torch.autocast"
    description = "bfloat16 autocast: matmuls and convolutions in bf16, the rest in fp32"
    # Training: the forward pass (loss included) runs under autocast, backward outside it, weights
    # and optimizer stay fp32. bf16 has fp32's range, so no loss scaling.
    modes = frozenset({INFERENCE, TRAINING})

    def supports(self, spec: ModelSpec, device: str, mode: str) -> str | None:
        if device == "cuda" and torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
            return "this CUDA device has no bfloat16 support"
        return super().supports(spec, device, mode)

    def apply(self, prepared: Prepared, ctx: TechniqueContext) -> Prepared:
        forward = _autocast_forward(prepared.forward, ctx.device.type, torch.bfloat16)
        return prepared.then(self.api, forward=forward, dtype="bfloat16 (autocast)")


@register_technique
class Fp16Autocast(Technique):
    name = "fp16_autocast"
    family = "precision"
    hardware = ("fp16",)
    devices = frozenset({"cuda", "mps"})
    api = "torch.autocast (CUDA AMP)"
    description = (
        "float16 autocast, the classic CUDA AMP (training adds torch.amp.GradScaler); on CPU use "
        "bf16_autocast instead"
    )
    modes = frozenset({INFERENCE, TRAINING})

    def apply(self, prepared: Prepared, ctx: TechniqueContext) -> Prepared:
        forward = _autocast_forward(prepared.forward, ctx.device.type, torch.float16)
        if ctx.mode == TRAINING:
            # fp16 gradients underflow without loss scaling: AMP is autocast plus GradScaler.
            return prepared.then(
                "torch.autocast + torch.amp.GradScaler",
                forward=forward,
                dtype="float16 (autocast)",
                grad_scaler=True,
            )
        return prepared.then(self.api, forward=forward, dtype="float16 (autocast)")
