"""The baseline every speedup is measured against: the model as built, fp32, eager."""

from __future__ import annotations

from optbench.catalog.techniques.base import (
    DATA,
    INFERENCE,
    TRAINING,
    Prepared,
    Technique,
    register_technique,
)
from optbench.catalog.techniques.context import TechniqueContext


@register_technique
class Eager(Technique):
    name = "eager"
    family = "baseline"
    api = "torch.nn.Module"
    description = "fp32 eager execution, unchanged: the reference for speedup and fidelity"
    # In data mode it is the plain DataLoader (num_workers=0, PIL decoding, augmentation, shuffling).
    modes = frozenset({INFERENCE, TRAINING, DATA})

    def apply(self, prepared: Prepared, ctx: TechniqueContext) -> Prepared:
        return prepared.then(self.api)
