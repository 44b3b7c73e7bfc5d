"""torch.compile with the inductor backend. Its compile time is reported as prepare_s."""

from __future__ import annotations

import shutil

import torch
from torch import nn

from optbench.modelspec import ModelSpec
from optbench.techniques.base import Prepared, Technique, register_technique


@register_technique
class Compile(Technique):
    name = "compile"
    family = "compile"
    api = "torch.compile (inductor)"
    description = "torch.compile(model) with the default inductor backend and mode"

    def supports(self, spec: ModelSpec, device: str, mode: str) -> str | None:
        if device == "cpu" and not (shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")):
            return "torch.compile on cpu needs a C++ compiler on PATH (inductor generates C++)"
        return super().supports(spec, device, mode)

    def apply(self, model: nn.Module, inputs: tuple[torch.Tensor, ...], device: torch.device) -> Prepared:
        # Compilation itself happens on the first call, which the runner times as part of prepare_s.
        compiled = torch.compile(model, backend="inductor")
        return Prepared(forward=compiled, inputs=inputs, module=model, dtype="float32", api=self.api)
