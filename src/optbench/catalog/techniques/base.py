"""Technique: one optimization, applied to a prepared model. Techniques know nothing of pytest or results."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from torch import nn

from optbench.catalog.models import ModelSpec, file_hash
from optbench.catalog.registry import Registry

if TYPE_CHECKING:
    from optbench.catalog.techniques.context import TechniqueContext

FAMILIES = ("baseline", "precision", "layout", "compile", "quantization", "pruning", "training", "data")
ALL_DEVICES = frozenset({"cpu", "cuda", "mps"})
PREPARATION_VARIES = frozenset({"compile", "quantization"})
"""Families timed as two independent preparations against eager (Technique.preparations)."""
FP32 = "float32"
INFERENCE, TRAINING, DATA = "inference", "training", "data"
MODES = (INFERENCE, TRAINING, DATA)
"""inference: time forward calls; training: time optimizer steps; data: time the input pipeline."""


class NotApplicable(Exception):
    """Raised by a technique that finds, once it sees the case, that it does not apply to it (a batch
    that does not split into its micro-batches): the case becomes a skipped row with this reason."""


def _same(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    return inputs


@dataclass(frozen=True)
class Prepared:
    """What a technique hands on: the callable to time, the inputs to call it with, and the module
    whose weights it runs. Techniques take one and return another, so they compose into stacks."""

    forward: Callable[..., Any]
    inputs: tuple[Any, ...]
    module: nn.Module
    """The module whose weights the technique produced (for size and parameter counts)."""
    dtype: str = FP32
    """The compute dtype: 'float32', 'bfloat16 (autocast)', 'int8', ..."""
    api: str = ""
    """The APIs that produced it, in order ('torch.channels_last + torch.autocast')."""
    adapt_inputs: Callable[[tuple[Any, ...]], tuple[Any, ...]] = _same
    """Applied to evaluation batches the way the technique changed `inputs` (e.g. channels_last)."""
    flops_per_sample: int | None = None
    """Set by a technique that changes the work itself (removing channels): the FLOPs of one
    sample's forward pass now. None: the fp32 model's count stands."""
    columns: Mapping[str, Any] = field(default_factory=dict)
    """Row columns the technique reports about itself (sparsity reached, calibration samples ...)."""
    micro_batches: int = 1
    """Training: split each step's batch into this many micro-batches and accumulate their gradients."""
    grad_scaler: bool = False
    """Training: scale the loss with torch.amp.GradScaler (float16 autocast needs it)."""

    def require_bare(self, technique: str, why: str) -> None:
        """Raise unless `forward` is still the module itself: a technique that rewrites or replaces
        the module's layers must come before any technique that wraps its call."""
        if self.forward is not self.module:
            raise ValueError(f"{technique} must come before techniques that wrap the model: {why}")

    @classmethod
    def eager(cls, model: nn.Module, inputs: tuple[Any, ...]) -> Prepared:
        """The starting point: the model as built, called on its example inputs."""
        return cls(forward=model, inputs=inputs, module=model)

    def then(
        self,
        api: str,
        *,
        forward: Callable[..., Any] | None = None,
        module: nn.Module | None = None,
        dtype: str | None = None,
        adapt_inputs: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = None,
        columns: Mapping[str, Any] | None = None,
        flops_per_sample: int | None = None,
        micro_batches: int | None = None,
        grad_scaler: bool | None = None,
    ) -> Prepared:
        """This Prepared after one more technique: its API is appended, its input change composed
        after the earlier ones (and applied to the example inputs now)."""
        adapt = self.adapt_inputs
        inputs = self.inputs
        if adapt_inputs is not None:
            first = self.adapt_inputs
            adapt = (lambda xs: adapt_inputs(first(xs))) if first is not _same else adapt_inputs
            inputs = adapt_inputs(inputs)
        return replace(
            self,
            forward=forward if forward is not None else self.forward,
            inputs=inputs,
            module=module if module is not None else self.module,
            dtype=dtype if dtype is not None else self.dtype,
            api=f"{self.api} + {api}" if self.api else api,
            adapt_inputs=adapt,
            columns={**self.columns, **(columns or {})},
            flops_per_sample=flops_per_sample if flops_per_sample is not None else self.flops_per_sample,
            micro_batches=micro_batches if micro_batches is not None else self.micro_batches,
            grad_scaler=grad_scaler if grad_scaler is not None else self.grad_scaler,
        )


class Technique:
    name: ClassVar[str]
    family: ClassVar[str]
    devices: ClassVar[frozenset[str]] = ALL_DEVICES
    modes: ClassVar[frozenset[str]] = frozenset({INFERENCE})
    api: ClassVar[str] = ""
    """The API that produced the result, e.g. 'torch.autocast' or 'torch.ao.quantization'."""
    description: ClassVar[str] = ""
    hardware: ClassVar[tuple[str, ...]] = ()
    """What it needs to pay off (keys of optbench.catalog.hardware.NEEDS: 'bf16', 'int8', 'fp16',
    '2:4'); a row on a machine without it carries a hardware_note."""
    shape_specific: ClassVar[bool] = False
    """True when the prepared object only serves the input shape it was prepared at (a graph exported
    with static shapes, say): the runner then applies the technique again for the evaluation shape."""
    standalone: ClassVar[bool] = True
    """False for a technique that only means something stacked on another (persistent_workers needs
    workers): the default matrix then has it inside stacks only."""
    exclusive_families: ClassVar[frozenset[str]] = frozenset({"precision", "quantization"})
    """Families of which a stack may hold one technique only (two compute precisions conflict)."""
    preparations: ClassVar[int] = 1
    """Independent preparations that paired timing alternates (optbench.measure.paired). Two where
    the family builds its own kernels or packed weights: two preparations of the same weights can run
    at measurably different speeds in one process (six int8 LSTMs 1.00x to 1.26x; docs:
    harness-honesty), and a single preparation's interval would not show it."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "preparations" not in cls.__dict__ and getattr(cls, "family", None) in PREPARATION_VARIES:
            cls.preparations = 2

    def supports(self, spec: ModelSpec, device: str, mode: str) -> str | None:
        """None when the technique applies, else the reason it does not (shown as the skip reason)."""
        if device not in self.devices:
            return f"{self.name} does not run on {device} (runs on: {', '.join(sorted(self.devices))})"
        if mode not in self.modes:
            return f"{self.name} has no {mode} mode (modes: {', '.join(sorted(self.modes))})"
        return None

    def conflict(self, other: Technique) -> str | None:
        """Why this technique and `other` cannot be stacked, or None."""
        if self.family == other.family and self.family in self.exclusive_families:
            return f"{self.name} and {other.name} both set the {self.family}; a stack takes one"
        return None

    def apply(self, prepared: Prepared, ctx: TechniqueContext) -> Prepared:
        """Return `prepared` after this technique. Runs outside inference mode, so a technique may
        calibrate, fine-tune or use autograd; the model is on `ctx.device`, in eval mode."""
        raise NotImplementedError

    def code_hash(self) -> str:
        return file_hash(inspect.getfile(type(self)))


TECHNIQUES: Registry[Technique] = Registry("technique")


def register_technique(cls: type[Technique]) -> type[Technique]:
    """Class decorator: register one instance of the technique under its name."""
    if cls.family not in FAMILIES:
        raise ValueError(f"technique {cls.name!r} has unknown family {cls.family!r}; families: {FAMILIES}")
    if "+" in cls.name:
        raise ValueError(f"technique name {cls.name!r} may not contain '+' (it joins techniques into stacks)")
    if cls.name == "all":
        raise ValueError("a technique may not be named 'all' (--techniques all selects every technique)")
    TECHNIQUES.add(cls.name, cls(), origin=inspect.getfile(cls))
    return cls


class LevelTechnique(Technique):
    """A technique that takes a whole-number percent in its name (`prune_l1_70`: 70% sparsity)."""

    prefix: ClassVar[str]
    describe: ClassVar[str]
    """The description, with {percent} in it."""

    def __init__(self, percent: int) -> None:
        self.percent = percent
        self.name = f"{self.prefix}_{percent}"  # type: ignore[misc]
        self.description = self.describe.format(percent=percent)  # type: ignore[misc]


@dataclass(frozen=True)
class Levels:
    cls: type[LevelTechnique]
    low: int
    high: int
    meaning: str


LEVELS: dict[str, Levels] = {}


def register_levels(
    cls: type[LevelTechnique], defaults: tuple[int, ...], low: int, high: int, meaning: str
) -> None:
    """Register `<prefix>_<N>` techniques: the default levels now (they join the default matrix),
    any other N in [low, high] when a user names it (`--techniques prune_l1_80`)."""
    LEVELS[cls.prefix] = Levels(cls, low, high, meaning)
    for level in defaults:
        _add_level(LEVELS[cls.prefix], level)


def _add_level(levels: Levels, level: int) -> None:
    tech = levels.cls(level)
    TECHNIQUES.add(tech.name, tech, origin=inspect.getfile(levels.cls))


def register_level_name(name: str) -> None:
    """Register `name` if it is a level of a registered family (`prune_l1_80`) and not yet known;
    raise a UsageProblem naming the valid range when its level is outside it."""
    from optbench.errors import UsageProblem

    if name in TECHNIQUES:
        return
    prefix, _, level = name.rpartition("_")
    levels = LEVELS.get(prefix)
    if levels is None:
        return
    if not level.lstrip("-").isdigit() or not levels.low <= int(level) <= levels.high:
        raise UsageProblem(
            f"{name}: {prefix}_<N> takes N, the {levels.meaning}, from {levels.low} to {levels.high}"
        )
    _add_level(levels, int(level))
