"""2:4 semi-structured sparsity on CUDA: in every group of four weights along a Linear layer's
input dimension the two smallest are zeroed, and the weight is stored with
torch.sparse.to_sparse_semi_structured, which NVIDIA's sparse tensor cores (compute capability 8.0
and up) multiply at up to twice the dense rate. The model runs in fp16, as those kernels need."""

from __future__ import annotations

import torch
from torch import nn

from optbench.catalog.compression import not_linear_heavy, replace_linears, without_mha_fastpath
from optbench.catalog.models import ModelSpec
from optbench.catalog.techniques.base import Prepared, Technique, register_technique
from optbench.catalog.techniques.context import TechniqueContext


def mask_2to4(weight: torch.Tensor) -> torch.Tensor:
    """Keep the two largest |w| of every four consecutive input weights."""
    groups = weight.reshape(-1, 4)
    keep = groups.abs().topk(2, dim=1).indices
    mask = torch.zeros_like(groups, dtype=torch.bool).scatter_(1, keep, True)
    return (groups * mask).reshape(weight.shape)


def _semi_structured(linear: nn.Linear) -> nn.Linear:
    from torch.sparse import to_sparse_semi_structured

    if linear.in_features % 64 or linear.out_features % 64:
        return linear  # the kernels need multiples of 64: such a layer stays dense
    linear.weight = nn.Parameter(
        to_sparse_semi_structured(mask_2to4(linear.weight.detach())), requires_grad=False
    )
    return linear


@register_technique
class Sparse2to4(Technique):
    name = "sparse_2to4"
    family = "pruning"
    hardware = ("2:4",)
    devices = frozenset({"cuda"})
    api = "torch.sparse.to_sparse_semi_structured (fp16)"
    description = "2:4 semi-structured sparse Linear weights in fp16 (CUDA, compute capability 8.0+)"
    exclusive_families = frozenset({"precision", "quantization", "pruning"})

    def supports(self, spec: ModelSpec, device: str, mode: str) -> str | None:
        reason = super().supports(spec, device, mode)
        if reason:
            return reason
        if not torch.cuda.is_available():
            return "2:4 semi-structured sparsity needs a CUDA GPU; none is available here"
        if torch.cuda.get_device_capability() < (8, 0):
            name = torch.cuda.get_device_name()
            return f"2:4 semi-structured sparsity needs compute capability 8.0 or higher; {name} has less"
        return not_linear_heavy(spec, self.name)

    def conflict(self, other: Technique) -> str | None:
        if other.family in ("precision", "quantization"):
            return f"{self.name} runs in fp16 already"
        return None

    def apply(self, prepared: Prepared, ctx: TechniqueContext) -> Prepared:
        prepared.require_bare(self.name, "it replaces the Linear weights")
        model = prepared.module.half()
        replace_linears(model, _semi_structured)

        def to_half(inputs: tuple) -> tuple:
            return tuple(x.half() if x.is_floating_point() else x for x in inputs)

        return prepared.then(
            self.api,
            forward=without_mha_fastpath(model),
            dtype="float16 (2:4 sparse)",
            adapt_inputs=to_half,
            columns={"sparsity": 0.5},
        )
