"""What the quantization and pruning techniques share: optional-library checks, which layers are
Linear-like, a seeded fine-tune on the task's train split, and errors that name the failing layer."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import torch
from torch import nn

from optbench.catalog.models import ModelSpec

FINETUNE_EPOCHS = 2
"""Passes over the model's training samples that a pruning technique fine-tunes for."""
FINETUNE_MAX_SAMPLES = 8192
"""...capped at this many samples. Two passes take about 60 s for resnet50 at 32x32 and 110 s for
the BERT-shaped encoder at 16 tokens on 2 CPU cores."""
FINETUNE_LR_SCALE = 0.3
"""Fine-tuning learning rate, as a fraction of the model's training recipe's."""
LINEAR_HEAVY = 0.5
"""A model is Linear-heavy when at least this fraction of its weights sit in Linear, attention
projection or LSTM layers: the layers int8 dynamic, weight-only and sparse Linear kernels change."""


class ConversionError(RuntimeError):
    """A conversion (tracing, quantizing, pruning) failed; the message names the layer and why."""


@cache
def missing(module: str, package: str) -> str | None:
    """None when `module` imports, else a skip reason that names the package to install."""
    try:
        importlib.import_module(module)
    except Exception as error:  # not installed, or installed but broken against this torch
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        return f"needs {package} (pip install {package}); importing {module} failed: {first}"
    return None


def api_missing(module: str, attribute: str, package: str) -> str | None:
    """Like `missing`, and also a skip when the installed version no longer has `attribute`."""
    reason = missing(module, package)
    if reason is None and not hasattr(importlib.import_module(module), attribute):
        return f"the installed {package} has no {module}.{attribute} (removed?): pip install -U {package}"
    return reason


def _linear_like_sizes(model: nn.Module) -> tuple[int, int]:
    """Weights in the layers dynamic int8 changes, and weights in layers that compute: an embedding
    table is a lookup, so its size says nothing of where the time goes (BERT-mini's vocabulary is
    70% of its weights and none of its arithmetic)."""
    linear = lookups = 0
    for module in model.modules():
        if isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
            lookups += sum(p.numel() for p in module.parameters())
        elif isinstance(module, nn.Linear):
            linear += module.weight.numel()
        elif isinstance(module, nn.MultiheadAttention) and module.in_proj_weight is not None:
            linear += module.in_proj_weight.numel()
        elif isinstance(module, nn.LSTM):
            linear += sum(p.numel() for n, p in module.named_parameters() if n.startswith("weight"))
    return linear, sum(p.numel() for p in model.parameters()) - lookups


@dataclass(frozen=True)
class Structure:
    """What a model is made of, read from the model itself (never from tags a user must know to set)."""

    linear_share: float
    """Share of the weights in Linear, attention-projection and LSTM layers, of all but embedding
    tables (lookups, not arithmetic)."""
    convolutions: int
    """Conv layers (1-, 2- and 3-D)."""
    attention: bool
    recurrent: bool
    error: str | None = None
    """The builder failed (the case will run, and fail as a row with this error)."""


_STRUCTURES: dict[tuple[str, str, str], Structure] = {}


def structure(spec: ModelSpec) -> Structure:
    key = (spec.name, spec.input_shape, spec.source)  # specs hold dicts: not hashable themselves
    if key not in _STRUCTURES:
        try:
            with torch.device("meta"):  # shapes only: no memory, no initialisation
                model = spec.build_model()
        except Exception as error:  # a user's builder: its case fails as a row, collection goes on
            _STRUCTURES[key] = Structure(0.0, 0, False, False, f"{type(error).__name__}: {error}")
            return _STRUCTURES[key]
        linear, total = _linear_like_sizes(model)
        modules = list(model.modules())
        _STRUCTURES[key] = Structure(
            linear / total if total else 0.0,
            sum(isinstance(m, nn.modules.conv._ConvNd) for m in modules),
            any(
                isinstance(m, nn.MultiheadAttention) or "attention" in type(m).__name__.lower()
                for m in modules
            ),
            any(isinstance(m, nn.RNNBase) for m in modules),
        )
    return _STRUCTURES[key]


def not_linear_heavy(spec: ModelSpec, technique: str) -> str | None:
    """A skip reason when too little of `spec`'s weights sit in the layers `technique` changes."""
    found = structure(spec)
    if found.error is None and found.linear_share < LINEAR_HEAVY:
        return (
            f"{technique} changes Linear, attention-projection and LSTM layers only, which hold "
            f"{found.linear_share:.0%} of {spec.name}'s weights outside embedding tables "
            f"(below {LINEAR_HEAVY:.0%}): nothing worth measuring"
        )
    return None


def not_convolutional(spec: ModelSpec, technique: str) -> str | None:
    """A skip reason unless `spec` is a convolutional network, read from its layers: convolutions, and
    no attention or recurrent layers (static int8 and channel pruning target CNNs)."""
    found = structure(spec)
    if found.error is not None:
        return None
    if not found.convolutions:
        return f"{technique} targets convolutional networks; {spec.name} has no convolution layers"
    if found.attention or found.recurrent:
        kind = "attention" if found.attention else "recurrent"
        return f"{technique} targets convolutional networks; {spec.name} has {kind} layers"
    return None


@contextlib.contextmanager
def _mha_fastpath(enabled: bool) -> Iterator[None]:
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(enabled)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(before)


def without_mha_fastpath(forward: Callable[..., Any]) -> Callable[..., Any]:
    """`forward` with PyTorch's fused transformer inference path off. That path reads each Linear's
    `.weight` tensor directly and fails on quantized or sparse replacements ('function' object has
    no attribute 'device'); the regular path calls the layers, so they run as converted."""

    def forward_without_fastpath(*inputs: Any) -> Any:
        with _mha_fastpath(False):
            return forward(*inputs)

    return forward_without_fastpath


def replace_linears(model: nn.Module, convert: Callable[[nn.Linear], nn.Module]) -> int:
    """Replace every plain nn.Linear (not attention's out_proj, which attention reads as a tensor)
    with `convert(layer)`; returns how many were replaced."""
    count = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, convert(child))
                count += 1
    return count


class _LayerTracer(torch.fx.Tracer):
    """An FX tracer that remembers which submodule it is in, to name the layer that breaks tracing."""

    def __init__(self) -> None:
        super().__init__()
        self.path: list[str] = []

    def call_module(self, m: nn.Module, forward: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        self.path.append(self.path_of_module(m) or type(m).__name__)
        result = super().call_module(m, forward, args, kwargs)
        self.path.pop()
        return result


def check_traceable(model: nn.Module, what: str) -> None:
    """Raise a ConversionError naming the layer when FX symbolic tracing (which `what` needs) fails."""
    tracer = _LayerTracer()
    try:
        tracer.trace(model)
    except Exception as error:
        layer = tracer.path[-1] if tracer.path else type(model).__name__
        kind = type(model.get_submodule(layer)).__name__ if tracer.path else "the model's forward"
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConversionError(f"{what} cannot trace layer {layer!r} ({kind}): {reason}") from error


def code_hash() -> str:
    """Hash of this file and of the trainer it shares (checkpoint_training: layout, BatchNorm
    recalibration): part of the cache key of anything fine_tune produced."""
    from optbench.catalog.checkpoint_training import train_code_hash
    from optbench.catalog.models import file_hash

    return f"{file_hash(__file__)}-{train_code_hash()}"


def finetune_key(ctx: Any) -> dict[str, str]:
    """The cache-key parts every fine-tuned pruning shares: the fine-tune's code and the device, whose
    layout and autocast the fine-tune follows."""
    return {"fine_tune": code_hash(), "device": ctx.device.type}


def memory_layout(model: nn.Module) -> torch.memory_format:
    """channels_last when any 4-D weight is stored so (the channels_last technique ran), else the
    default layout: what to give a model back in after working on it in another."""
    if any(p.dim() == 4 and not p.is_contiguous() for p in model.parameters()):
        return torch.channels_last
    return torch.contiguous_format


def finetune_samples(spec: ModelSpec, train_size: int, epochs: int = FINETUNE_EPOCHS) -> int:
    """How many samples (with repeats) the fine-tune after pruning trains on."""
    per_epoch = min(train_size, spec.recipe.train_samples or train_size)
    return min(epochs * per_epoch, FINETUNE_MAX_SAMPLES)


def fine_tune(
    model: nn.Module,
    spec: ModelSpec,
    ctx: Any,
    epochs: int = FINETUNE_EPOCHS,
    lr_scale: float = FINETUNE_LR_SCALE,
) -> int:
    """A short seeded fine-tune on the train split (finetune_samples of it, cosine-decayed from a
    fraction of the recipe's learning rate), so accuracy can recover from pruning; masks from
    torch.nn.utils.prune stay applied. Returns the samples trained on. The model is left in eval
    mode, with BatchNorm statistics recomputed on the train split."""
    from optbench.catalog.checkpoint_training import recalibrate_batchnorm, training_layout

    recipe = spec.recipe
    x, _ = ctx.train_split()
    per_epoch = min(len(x), recipe.train_samples or len(x))
    samples = finetune_samples(spec, len(x), epochs)
    steps_per_epoch = -(-per_epoch // recipe.batch_size)
    steps = -(-samples // recipe.batch_size)
    torch.manual_seed(ctx.seed)  # dropout
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad],
        lr=recipe.lr * lr_scale,
        weight_decay=recipe.weight_decay,
    )
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    loss_fn = nn.CrossEntropyLoss()
    autocast = getattr(torch, recipe.autocast) if recipe.autocast else None

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        taken = 0
        for epoch in range(-(-steps // steps_per_epoch)):
            for xb, yb in replace(ctx, seed=ctx.seed + epoch).train_batches(per_epoch, recipe.batch_size):
                if taken == steps:
                    return
                taken += 1
                yield xb, yb

    # The CPU's fast layout for a CNN's training steps (checkpoint_training.training_layout);
    # the model goes back to the layout it came in (a stack may have made it channels_last already).
    came_in = memory_layout(model)
    layout = training_layout(spec, model, x) if ctx.device.type == "cpu" else torch.contiguous_format
    model.train()
    for xb, yb in ctx.progress(batches(), f"fine-tuning {spec.name} ({ctx.technique})", total=steps):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(ctx.device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
            loss = loss_fn(model(xb.contiguous(memory_format=layout)), yb)
        loss.backward()
        if recipe.clip_grad_norm:
            nn.utils.clip_grad_norm_(model.parameters(), recipe.clip_grad_norm)
        optimizer.step()
        schedule.step()
    model.to(memory_format=came_in)
    recalibrate_batchnorm(model, x[:per_epoch].to(ctx.device), recipe.batch_size)
    model.eval()
    return min(samples, steps * recipe.batch_size)


def accepts_task_inputs(spec: ModelSpec) -> bool:
    """Whether a model built for `spec` runs on the task's train split: a shape-tied model (ViT)
    built at its deployment shape does not."""
    return not spec.shape_tied or spec.input_shape == spec.task_input_shape


def drop_unused_attributes(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Delete the parameters and buffers a converted graph no longer reads. PT2E's convert keeps
    the original fp32 weights beside the int8 ones it folded, which would double the model's size."""
    used = {str(node.target) for node in gm.graph.nodes if node.op == "get_attr"}
    for name, _ in list(gm.named_parameters()) + list(gm.named_buffers()):
        if name not in used and not any(u.startswith(name + ".") for u in used):
            owner, _, leaf = name.rpartition(".")
            module = gm.get_submodule(owner) if owner else gm
            if leaf in module._parameters:
                del module._parameters[leaf]
            elif leaf in module._buffers:
                del module._buffers[leaf]
    return gm
