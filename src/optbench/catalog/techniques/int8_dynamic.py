"""int8 dynamic quantization of Linear and LSTM layers: weights stored in int8, activations
quantized per call. Two APIs: torch.ao's quantize_dynamic (what the founding document names) and
torchao's Int8DynamicActivationInt8WeightConfig (where quantization development moved); the latter
also stacks with compile (`torchao_int8_dynamic+compile`)."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from optbench.catalog.compression import api_missing, not_linear_heavy, without_mha_fastpath
from optbench.catalog.models import ModelSpec
from optbench.catalog.techniques.base import Prepared, Technique, register_technique
from optbench.catalog.techniques.context import TechniqueContext
from optbench.catalog.techniques.stack import register_default_stack


@register_technique
class Int8Dynamic(Technique):
    name = "int8_dynamic"
    family = "quantization"
    hardware = ("int8",)
    devices = frozenset({"cpu"})  # torch.ao's quantized kernels are CPU kernels (x86 / fbgemm)
    api = "torch.ao.quantization.quantize_dynamic"
    description = "int8 dynamic quantization of nn.Linear and nn.LSTM (torch.ao, x86 backend)"

    def supports(self, spec: ModelSpec, device: str, mode: str) -> str | None:
        return (
            super().supports(spec, device, mode)
            or api_missing("torch.ao.quantization", "quantize_dynamic", "torch")
            or not_linear_heavy(spec, self.name)
        )

    def apply(self, prepared: Prepared, ctx: TechniqueContext) -> Prepared:
        prepared.require_bare(self.name, "it replaces the Linear and LSTM layers")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # torch.ao warns on every call
            model = torch.ao.quantization.quantize_dynamic(
                prepared.module, {nn.Linear, nn.LSTM}, dtype=torch.qint8
            )
        # The fused transformer path reads Linear weights as tensors: quantized ones break it.
        return prepared.then(
            self.api, forward=without_mha_fastpath(model), module=model, dtype="int8 (dynamic)"
        )


class _Torchao(Technique):
    family = "quantization"
    hardware = ("int8",)
    devices = frozenset({"cpu", "cuda"})
    config_name: str
    dtype: str

    def supports(self, spec: ModelSpec, device: str, mode: str) -> str | None:
        return (
            super().supports(spec, device, mode)
            or api_missing("torchao.quantization", self.config_name, "torchao")
            or not_linear_heavy(spec, self.name)
        )

    def apply(self, prepared: Prepared, ctx: TechniqueContext) -> Prepared:
        import torchao
        import torchao.quantization as tq

        prepared.require_bare(self.name, "it swaps the Linear weights in place")
        tq.quantize_(prepared.module, getattr(tq, self.config_name)())
        forward = without_mha_fastpath(prepared.module)
        api = f"torchao {torchao.__version__} quantize_({self.config_name})"
        return prepared.then(api, forward=forward, dtype=self.dtype)


@register_technique
class TorchaoInt8Dynamic(_Torchao):
    name = "torchao_int8_dynamic"
    api = "torchao.quantization.quantize_(Int8DynamicActivationInt8WeightConfig)"
    description = "torchao int8 dynamic activations and int8 weights for nn.Linear"
    config_name = "Int8DynamicActivationInt8WeightConfig"
    dtype = "int8 (dynamic)"


@register_technique
class TorchaoInt8WeightOnly(_Torchao):
    name = "torchao_int8_weight_only"
    api = "torchao.quantization.quantize_(Int8WeightOnlyConfig)"
    description = "torchao int8 weights, fp32 compute (dequantized per call) for nn.Linear"
    config_name = "Int8WeightOnlyConfig"
    dtype = "float32 (int8 weights)"


register_default_stack("torchao_int8_dynamic+compile", {"cpu", "cuda"})
