"""Structured pruning that removes whole channels (torch-pruning's dependency graph keeps the
network consistent), L1 magnitude importance, then a short seeded fine-tune: the model really gets
smaller and its convolutions cheaper. `prune_channels_30` and `_50` are in the default matrix (the
fraction of each layer's channels removed); `prune_channels_<N>` takes N from 1 to 90.

The pruned architecture is recomputed from the weights on every use (deterministic, about a
second); the fine-tuned weights of that architecture come from the technique cache."""

from __future__ import annotations

from torch import nn

from optbench.catalog.compression import fine_tune, finetune_key, finetune_samples, missing, not_convolutional
from optbench.catalog.cost import count_flops
from optbench.catalog.models import ModelSpec
from optbench.catalog.techniques.base import LevelTechnique, Prepared, register_levels
from optbench.catalog.techniques.context import TechniqueContext
from optbench.catalog.techniques.stack import register_default_stack

FINETUNE_EPOCHS = 4
"""Removing channels changes the network more than zeroing weights: it fine-tunes longer, at the
recipe's full learning rate (cheap: the pruned network is smaller)."""

ROUND_TO = 8
"""Keep a multiple of 8 channels in every pruned layer. Quantized depthwise convolutions (x86
engine, torch 2.14) can take a path about 100x slower otherwise: 470 channels at 14x14, 5x5, batch 8,
ran 76 ms against 0.6 ms for 472 (scripts/quantized_channels.py, docs/quantization-and-pruning.md).
Unrounded, 30% pruning made EfficientNet-B0's int8 stack 0.46x of eager; 50% (all multiples of 8) 4.08x."""


def _classifier(model: nn.Module) -> list[nn.Module]:
    """The final Linear layer(s): their outputs are the classes, never pruned."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    return linears[-1:]


class PruneChannels(LevelTechnique):
    prefix = "prune_channels"
    family = "pruning"
    api = "torch_pruning.MetaPruner (L1 magnitude)"
    describe = "remove {percent}% of each layer's channels (torch-pruning, L1), fine-tuned"

    def supports(self, spec: ModelSpec, device: str, mode: str) -> str | None:
        return (
            super().supports(spec, device, mode)
            or not_convolutional(spec, self.name)
            or missing("torch_pruning", "torch-pruning")
        )

    def apply(self, prepared: Prepared, ctx: TechniqueContext) -> Prepared:
        import torch_pruning as tp

        model = prepared.module
        prepared.require_bare(self.name, "it rebuilds the layers")
        before = sum(p.numel() for p in model.parameters())
        pruner = tp.pruner.MetaPruner(
            model,
            tuple(x[:1] for x in prepared.inputs),
            importance=tp.importance.MagnitudeImportance(p=1),
            pruning_ratio=self.percent / 100,
            ignored_layers=_classifier(model),
            round_to=ROUND_TO,
        )
        pruner.step()
        after = sum(p.numel() for p in model.parameters())
        finetuned = ctx.has_train_split

        def finetune() -> dict:
            fine_tune(model, ctx.spec, ctx, epochs=FINETUNE_EPOCHS, lr_scale=1.0)
            return model.state_dict()

        if finetuned:
            model.load_state_dict(
                ctx.cached(
                    "finetuned",
                    finetune,
                    percent=self.percent,
                    **finetune_key(ctx),
                    torch_pruning=tp.__version__,
                )
            )
        model.eval()
        columns = {
            "sparsity": 1 - after / before,  # of the parameters, removed outright
            "finetune_samples": (
                finetune_samples(ctx.spec, len(ctx.train_split()[1]), FINETUNE_EPOCHS) if finetuned else 0
            ),
        }
        # Fewer channels, less work: FLOPs (and so pct_of_peak) are those of the pruned network.
        flops = count_flops(model, prepared.inputs) // len(prepared.inputs[0])
        return prepared.then(
            f"torch_pruning {tp.__version__} MetaPruner (L1)", columns=columns, flops_per_sample=flops
        )


register_levels(PruneChannels, (30, 50), 1, 90, "percent of channels removed")
# The founding document's edge recipe for CNNs: remove channels, then int8 static.
register_default_stack("prune_channels_50+int8_static_fx", {"cpu"})
register_default_stack("prune_channels_30+int8_static_fx", {"cpu"})
