"""channels_last (NHWC) memory format for convolution-heavy image models."""

from __future__ import annotations

import torch

from optbench.catalog.models import IMAGE, ModelSpec
from optbench.catalog.techniques.base import INFERENCE, TRAINING, Prepared, Technique, register_technique
from optbench.catalog.techniques.context import TechniqueContext


@register_technique
class ChannelsLast(Technique):
    name = "channels_last"
    family = "layout"
    api = "torch.channels_last"
    description = "weights and inputs in NHWC layout, which oneDNN and cuDNN convolutions prefer"
    modes = frozenset({INFERENCE, TRAINING})

    def supports(self, spec: ModelSpec, device: str, mode: str) -> str | None:
        if spec.task != IMAGE:
            return "channels_last applies to 4-D image inputs only"
        return super().supports(spec, device, mode)

    def apply(self, prepared: Prepared, ctx: TechniqueContext) -> Prepared:
        prepared.module.to(memory_format=torch.channels_last)  # in place: forward may wrap the module
        return prepared.then(self.api, adapt_inputs=_nhwc)


def _nhwc(inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return tuple(x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x for x in inputs)
