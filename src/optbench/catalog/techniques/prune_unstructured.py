"""Unstructured magnitude pruning with torch.nn.utils.prune: the smallest |w| of every Linear, conv,
attention-projection and LSTM weight zeroed, the same fraction in each layer (L1 per layer; global
L1 over all layers emptied whole small layers of EfficientNet, MobileNet and ViT and left them at
chance accuracy), a short seeded fine-tune on the train split with
the masks held, then made permanent. `prune_l1_50`, `_70`, `_90` are in the default matrix; any
`prune_l1_<N>` (N from 1 to 99) can be asked for.

Zeroed weights stay in dense tensors: the row's size_bytes does not shrink, its compressed size and
nonzero_fraction do, and its speed is dense speed. Stack `+linear_csr` to run the sparse Linear
layers as sparse matrices, or `+int8_dynamic` for the edge recipe."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import prune

from optbench.catalog.compression import (
    accepts_task_inputs,
    fine_tune,
    finetune_key,
    finetune_samples,
    memory_layout,
)
from optbench.catalog.techniques.base import LevelTechnique, Prepared, register_levels
from optbench.catalog.techniques.context import TechniqueContext
from optbench.catalog.techniques.stack import register_default_stack


def prunable(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """The weights that carry the model's matmuls and convolutions. Embeddings, norms and biases stay
    dense, and so does attention's out_proj: attention reads its weight as a tensor without calling
    it, so torch.nn.utils.prune's per-call mask would never be applied during fine-tuning."""
    found: list[tuple[nn.Module, str]] = []
    for module in model.modules():
        if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)) or type(module) is nn.Linear:
            found.append((module, "weight"))
        elif isinstance(module, nn.MultiheadAttention) and module.in_proj_weight is not None:
            found.append((module, "in_proj_weight"))
        elif isinstance(module, nn.LSTM):
            found += [(module, name) for name, _ in module.named_parameters() if name.startswith("weight")]
    return found


def zero_fraction(targets: list[tuple[nn.Module, str]]) -> float:
    total = sum(getattr(m, n).numel() for m, n in targets)
    zeros = sum(int((getattr(m, n) == 0).sum()) for m, n in targets)
    return zeros / total if total else 0.0


class PruneL1(LevelTechnique):
    prefix = "prune_l1"
    family = "pruning"
    api = "torch.nn.utils.prune.l1_unstructured (per layer)"
    describe = "L1 unstructured pruning of every layer to {percent}% sparsity, fine-tuned, made permanent"

    def apply(self, prepared: Prepared, ctx: TechniqueContext) -> Prepared:
        model = prepared.module
        amount = self.percent / 100
        finetune = accepts_task_inputs(ctx.spec) and ctx.has_train_split

        def prune_and_finetune() -> dict[str, torch.Tensor]:
            came_in = memory_layout(model)
            model.to(memory_format=torch.contiguous_format)  # l1_unstructured views each weight flat
            targets = prunable(model)
            for module, name in targets:
                prune.l1_unstructured(module, name, amount=amount)
            if finetune:
                fine_tune(model, ctx.spec, ctx)
            for module, name in targets:
                prune.remove(module, name)
            model.to(memory_format=came_in)
            return model.state_dict()

        if finetune:
            # Fine-tuned weights depend on the weights, data, seed and level: cached across cases.
            model.load_state_dict(
                ctx.cached(
                    "finetuned",
                    prune_and_finetune,
                    percent=self.percent,
                    **finetune_key(ctx),
                )
            )
        else:
            # A shape-tied model built at its deployment shape cannot take the task's inputs. Its
            # timing only depends on the sparsity; accuracy comes from the copy the runner prepares
            # at the task shape, which is fine-tuned.
            prune_and_finetune()
        model.eval()
        columns = {
            "sparsity": zero_fraction(prunable(model)),
            "finetune_samples": finetune_samples(ctx.spec, len(ctx.train_split()[1])) if finetune else 0,
        }
        return prepared.then(self.api, dtype=f"{prepared.dtype} ({self.percent}% sparse)", columns=columns)


register_levels(PruneL1, (50, 70, 90), 1, 99, "percent of weights zeroed")
# The edge recipe for Linear-heavy models: prune, then int8 dynamic.
register_default_stack("prune_l1_70+int8_dynamic", {"cpu"})
