"""The baseline every speedup is measured against: the model as built, fp32, eager."""

from __future__ import annotations

import torch
from torch import nn

from optbench.techniques.base import Prepared, Technique, register_technique


@register_technique
class Eager(Technique):
    name = "eager"
    family = "baseline"
    api = "torch.nn.Module"
    description = "fp32 eager execution, unchanged: the reference for speedup and fidelity"

    def apply(self, model: nn.Module, inputs: tuple[torch.Tensor, ...], device: torch.device) -> Prepared:
        return Prepared(forward=model, inputs=inputs, module=model, dtype="float32", api=self.api)
