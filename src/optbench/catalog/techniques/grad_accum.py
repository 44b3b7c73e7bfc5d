"""Gradient accumulation: each optimizer step's batch in k micro-batches (`grad_accum_4`), gradients
summed before one step. The effective batch stays the case's batch size; activations are those of
one micro-batch, so peak memory falls while throughput pays for k smaller calls."""

from __future__ import annotations

from optbench.catalog.techniques.base import (
    TRAINING,
    LevelTechnique,
    NotApplicable,
    Prepared,
    register_levels,
)
from optbench.catalog.techniques.context import TechniqueContext


class GradAccum(LevelTechnique):
    prefix = "grad_accum"
    family = "training"
    modes = frozenset({TRAINING})
    api = "loss / k, k backward passes, one optimizer.step()"
    describe = "gradient accumulation over {percent} micro-batches at the same effective batch"

    @property
    def micro_batches(self) -> int:
        return self.percent  # the level is the number of micro-batches, not a percent

    def apply(self, prepared: Prepared, ctx: TechniqueContext) -> Prepared:
        k = self.micro_batches
        if ctx.batch_size % k:
            raise NotApplicable(
                f"batch {ctx.batch_size} does not split into {k} equal micro-batches "
                f"(give --batch-sizes a multiple of {k})"
            )
        return prepared.then(
            f"{self.api} (k={k})",
            micro_batches=prepared.micro_batches * k,
            columns={"micro_batch_size": ctx.batch_size // (prepared.micro_batches * k)},
        )


register_levels(GradAccum, defaults=(2, 4), low=2, high=1024, meaning="number of micro-batches")
