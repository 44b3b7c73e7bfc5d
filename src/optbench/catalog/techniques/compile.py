"""torch.compile with the inductor backend. Its compile time is reported as prepare_s."""

from __future__ import annotations

import shutil

import torch

from optbench.catalog.models import ModelSpec
from optbench.catalog.techniques.base import INFERENCE, TRAINING, Prepared, Technique, register_technique
from optbench.catalog.techniques.context import TechniqueContext


@register_technique
class Compile(Technique):
    name = "compile"
    family = "compile"
    api = "torch.compile (inductor)"
    description = "torch.compile(model) with the inductor backend, default mode, static shapes"
    modes = frozenset({INFERENCE, TRAINING})  # training: AOTAutograd compiles the backward too

    def supports(self, spec: ModelSpec, device: str, mode: str) -> str | None:
        if device == "cpu" and not (shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")):
            return "torch.compile on cpu needs a C++ compiler on PATH (inductor generates C++)"
        return super().supports(spec, device, mode)

    def apply(self, prepared: Prepared, ctx: TechniqueContext) -> Prepared:
        # Dynamo caches graphs per code object, shared by every instance of a class (all ResNets):
        # without a reset a case could reuse another case's graph, or a symbolic-shape one, and its
        # prepare_s would hold no compilation. Static shapes: each case is compiled for its own shape.
        torch._dynamo.reset()
        # Compilation itself happens on the first call, which the runner times as part of prepare_s.
        compiled = torch.compile(prepared.forward, backend="inductor", dynamic=False)
        return prepared.then(self.api, forward=compiled)
