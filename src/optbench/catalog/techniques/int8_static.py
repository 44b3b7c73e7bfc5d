"""int8 static post-training quantization of CNNs, calibrated on the task's train split (through the
technique context, `--calibration-samples` of them, cached): weights and activations in int8.

Two paths: FX graph mode (torch.ao, x86 backend), and PT2E, the current one: torch.export, torchao's
X86InductorQuantizer, then torch.compile, which lowers the quantized graph to int8 kernels. Both
calibrate at the input shape they are prepared for; calibration is part of prepare_s."""

from __future__ import annotations

import warnings

import torch

from optbench.catalog.compression import (
    api_missing,
    check_traceable,
    drop_unused_attributes,
    not_convolutional,
)
from optbench.catalog.models import ModelSpec
from optbench.catalog.own_weights import state_digest
from optbench.catalog.techniques.base import Prepared, Technique, register_technique
from optbench.catalog.techniques.context import TechniqueContext

_SEEN = "optbench.calibration_samples"
_OBSERVER = "activation_post_process"


def _calibrate(observed: torch.nn.Module, ctx: TechniqueContext, label: str, path: str) -> int:
    """Run the observed model over the calibration batches; returns the samples seen.

    The activation observers' statistics are cached (TechniqueContext.cached): calibrating runs the
    observed model at the deployment shape, 10-12 s a case on 2 cores, and a warm run would repeat it
    for the same result. The key holds the observed model's whole state before calibrating (the
    weights as the techniques before it in a stack left them), the samples, batch size and shape."""

    def calibrate() -> dict[str, torch.Tensor]:
        seen = 0
        total = -(-ctx.calibration_samples // ctx.batch_size)
        with torch.no_grad():
            for x in ctx.progress(ctx.calibration_batches(), f"calibrating {label}", total=total):
                observed(x)
                seen += len(x)
        state = {k: v for k, v in observed.state_dict().items() if _OBSERVER in k}
        return {**state, _SEEN: torch.tensor(seen)}

    state = dict(
        ctx.cached(
            f"calibration-{path}",
            calibrate,
            observed=state_digest(observed.state_dict()),
            samples=ctx.calibration_samples,
            batch_size=ctx.batch_size,
            input_shape=ctx.input_shape,
        )
    )
    seen = int(state.pop(_SEEN))
    # A cache hit loads the statistics into the fresh observers; after calibrating, this is a no-op.
    observed.load_state_dict(state, strict=False)
    return seen


def slow_depthwise_note(model: torch.nn.Module) -> str | None:
    """A note when the quantized model has depthwise convolutions whose channel counts are not
    multiples of 8: the x86 engine can run those about 100x slower (470 channels: 76 ms, 472: 0.6 ms;
    scripts/quantized_channels.py). Not every such count is slow (100 is not), hence "can"."""
    from torch.ao.nn.quantized import Conv2d as QuantizedConv2d

    odd = [
        m.out_channels
        for m in model.modules()
        if isinstance(m, QuantizedConv2d)
        and m.groups > 1
        and m.groups == m.in_channels
        and m.out_channels % 8
    ]
    if not odd:
        return None
    shown = ", ".join(str(c) for c in sorted(set(odd))[:4])
    return (
        f"{len(odd)} int8 depthwise convolution(s) with channel counts that are not multiples of 8 "
        f"({shown}): the x86 engine can run such counts about 100x slower; keep channels a multiple "
        "of 8 (docs: quantization-and-pruning, Channel counts and int8)"
    )


class _Static(Technique):
    family = "quantization"
    hardware = ("int8",)
    devices = frozenset({"cpu"})  # the x86 int8 kernels

    def supports(self, spec: ModelSpec, device: str, mode: str) -> str | None:
        return super().supports(spec, device, mode) or not_convolutional(spec, self.name)


@register_technique
class Int8StaticFx(_Static):
    name = "int8_static_fx"
    api = "torch.ao.quantization.quantize_fx (x86)"
    description = "int8 static quantization, FX graph mode, x86 backend, calibrated on train data"

    def apply(self, prepared: Prepared, ctx: TechniqueContext) -> Prepared:
        from torch.ao.quantization import get_default_qconfig_mapping
        from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

        prepared.require_bare(self.name, "it rewrites the model into a quantized graph")
        check_traceable(prepared.module, "FX graph mode quantization")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            observed = prepare_fx(prepared.module, get_default_qconfig_mapping("x86"), prepared.inputs)
            seen = _calibrate(observed, ctx, f"{ctx.spec.name} (FX)", "fx")
            model = convert_fx(observed)
        columns = {"calibration_samples": seen, "kernel_note": slow_depthwise_note(model)}
        return prepared.then(self.api, forward=model, module=model, dtype="int8", columns=columns)


@register_technique
class Int8StaticPt2e(_Static):
    name = "int8_static_pt2e"
    api = "torchao PT2E X86InductorQuantizer + torch.compile"
    description = (
        "int8 static quantization through torch.export + torchao's X86InductorQuantizer, then torch.compile"
    )
    shape_specific = True  # exported and compiled for one input shape

    def supports(self, spec: ModelSpec, device: str, mode: str) -> str | None:
        return super().supports(spec, device, mode) or api_missing(
            "torchao.quantization.pt2e.quantize_pt2e", "prepare_pt2e", "torchao"
        )

    def conflict(self, other: Technique) -> str | None:
        if other.family == "compile":
            return f"{self.name} compiles already (PT2E lowers through torch.compile)"
        return super().conflict(other)

    def apply(self, prepared: Prepared, ctx: TechniqueContext) -> Prepared:
        import torchao
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
            X86InductorQuantizer,
            get_default_x86_inductor_quantization_config,
        )

        prepared.require_bare(self.name, "it rewrites the model into a quantized graph")
        # Everything under no_grad: inductor's freezing (below) only folds weights into constants
        # that autograd does not track.
        with torch.no_grad():
            # strict=True: with strict=False, torch 2.14.1 + torchao 0.18 fail on resnet ("Input
            # partition has more than one output node").
            exported = torch.export.export(prepared.module, prepared.inputs, strict=True).module()
            quantizer = X86InductorQuantizer()
            quantizer.set_global(get_default_x86_inductor_quantization_config())
            observed = prepare_pt2e(exported, quantizer)
            seen = _calibrate(observed, ctx, f"{ctx.spec.name} (PT2E)", f"pt2e-{torchao.__version__}")
            model = drop_unused_attributes(convert_pt2e(observed))
        torch._dynamo.reset()  # as the compile technique: this case's graphs only
        compiled = torch.compile(model, backend="inductor", dynamic=False)

        def forward(*inputs: torch.Tensor) -> torch.Tensor:
            # Freezing folds the int8 weights into constants so inductor picks its int8 kernels; it
            # is read when a graph compiles, which may happen again on a later call (inference
            # mode), so every call carries it. torch.compile(options=...) did not reach it here.
            with torch._inductor.config.patch(freezing=True):
                return compiled(*inputs)

        with torch.no_grad():
            forward(*prepared.inputs)  # compile here, with no autograd state on the weights
        api = f"torchao {torchao.__version__} PT2E X86InductorQuantizer + torch.compile"
        return prepared.then(
            api,
            forward=forward,
            module=model,
            dtype="int8",
            columns={"calibration_samples": seen},
        )
