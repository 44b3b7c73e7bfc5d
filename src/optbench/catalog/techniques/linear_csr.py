"""Sparse execution of Linear layers: each nn.Linear's weight stored as a torch sparse CSR matrix
and multiplied with torch.sparse.mm (MKL's sparse kernels on x86). On its own it shows what CSR
costs on a dense model; stacked after pruning (`prune_l1_90+linear_csr`) it shows at what sparsity
sparse kernels start to pay on this machine (on 2 EPYC cores, a BERT-sized 768x3072 layer: slower
than dense at 50% and 70% zeros, faster at 90%)."""

from __future__ import annotations

import torch
from torch import nn

from optbench.catalog.compression import not_linear_heavy, replace_linears, without_mha_fastpath
from optbench.catalog.models import ModelSpec
from optbench.catalog.techniques.base import Prepared, Technique, register_technique
from optbench.catalog.techniques.context import TechniqueContext
from optbench.catalog.techniques.stack import register_default_stack


class CsrLinear(nn.Module):
    """nn.Linear with its weight in CSR layout."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = nn.Parameter(linear.weight.detach().to_sparse_csr(), requires_grad=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        out = torch.sparse.mm(self.weight, flat.t()).t()
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)


@register_technique
class LinearCsr(Technique):
    name = "linear_csr"
    family = "pruning"
    devices = frozenset({"cpu", "cuda"})
    api = "torch.Tensor.to_sparse_csr + torch.sparse.mm"
    description = "Linear weights as sparse CSR matrices (stack after prune_l1_<N>)"

    def supports(self, spec: ModelSpec, device: str, mode: str) -> str | None:
        return super().supports(spec, device, mode) or not_linear_heavy(spec, self.name)

    def apply(self, prepared: Prepared, ctx: TechniqueContext) -> Prepared:
        prepared.require_bare(self.name, "it replaces the Linear layers")
        replaced = replace_linears(prepared.module, CsrLinear)
        return prepared.then(
            self.api,
            forward=without_mha_fastpath(prepared.module),
            columns={"csr_layers": replaced},
        )


for _percent in (50, 70, 90):
    register_default_stack(f"prune_l1_{_percent}+linear_csr", {"cpu"})
