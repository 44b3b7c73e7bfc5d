"""A Case is one cell of the matrix: model x technique x device x batch size x mode."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from optbench.catalog.devices import unavailable_reason
from optbench.catalog.models import IMAGE, MODELS, ModelSpec
from optbench.catalog.techniques import Stack, Technique, default_techniques, resolve
from optbench.catalog.techniques.stack import profile_techniques
from optbench.matrix.profiles import get_profile

BASELINE = "eager"
EVERY = "all"
"""--techniques all: every registered technique and each device's default stacks, whatever the profile."""


@dataclass(frozen=True)
class Case:
    model: str
    technique: str
    device: str
    batch_size: int
    mode: str = "inference"
    skip_reason: str | None = field(default=None, compare=False)

    @property
    def id(self) -> str:
        suffix = "" if self.mode == "inference" else f"-{self.mode}"
        return f"{self.model}-{self.technique}-{self.device}-bs{self.batch_size}{suffix}"

    @property
    def spec(self) -> ModelSpec:
        return MODELS.get(self.model)

    @property
    def tech(self) -> Technique:
        """The technique, or the stack of techniques, this case applies."""
        return resolve(self.technique)

    @property
    def families(self) -> tuple[str, ...]:
        """The technique families involved (each part's, for a stack)."""
        tech = self.tech
        return tech.families if isinstance(tech, Stack) else (tech.family,)

    @property
    def family(self) -> str:
        """The row's family column: 'precision', or 'layout+precision+compile' for a stack."""
        return "+".join(self.families)

    @property
    def group(self) -> tuple[str, str, str, int]:
        """Cases that share one eager baseline."""
        return (self.model, self.device, self.mode, self.batch_size)

    def baseline(self) -> Case:
        return Case(self.model, BASELINE, self.device, self.batch_size, self.mode)


@dataclass(frozen=True)
class Selection:
    models: list[str]
    techniques: list[str] | None
    """None: the profile's own list where it has one, else every registered technique plus each
    device's default stacks; [EVERY]: the latter whatever the profile."""
    devices: list[str]
    batch_sizes: list[int] | None
    """None: each model's batch sizes for the profile."""
    profile: str
    weights: str = "trained"
    """random, trained or pretrained: models without such weights become skipped cases."""
    models_given: bool = False
    """True when the user named the models (a benchmark test's own default models then give way)."""
    shard: Any = None
    """The optbench.matrix.shard.Shard this run measures (None: the whole matrix)."""

    def for_test(self, models: tuple[str, ...] | None, batch_sizes: object) -> Selection:
        """This selection as a benchmark test narrows it when the user did not choose: its `models`
        (those registered), its `batch_sizes` (a tuple, or a dict per profile)."""
        changes: dict[str, object] = {}
        known = [m for m in models or () if m in MODELS]
        if known and not self.models_given:
            changes["models"] = known
        if isinstance(batch_sizes, dict):
            batch_sizes = get_profile(self.profile).batch_sizes(batch_sizes) or batch_sizes.get("default")
        if batch_sizes and self.batch_sizes is None:
            changes["batch_sizes"] = list(batch_sizes)  # type: ignore[call-overload]
        return replace(self, **changes) if changes else self  # type: ignore[arg-type]


def build_matrix(selection: Selection, mode: str) -> list[Case]:
    """Every case of the selection, each eager baseline first in its group so speedups are measured
    close in time. Unsupported cases stay in, with the reason they will be skipped."""

    profile = get_profile(selection.profile)

    def techniques_on(device: str) -> list[str]:
        chosen = selection.techniques
        if chosen == [EVERY]:
            chosen = default_techniques(device, mode)
        elif chosen is None:
            # A profile's own list (the default's, the gate's) keeps what has this mode and, for a
            # device's default stacks, this device.
            own = None if profile.techniques is None else profile.techniques.get(mode, ())
            chosen = (
                default_techniques(device, mode) if own is None else profile_techniques(own, device, mode)
            )
        return [t for t in chosen if t == BASELINE] + [t for t in chosen if t != BASELINE]

    from optbench.catalog.weights import WeightsProvider

    weights = WeightsProvider(selection.weights)
    cases = []
    for model in selection.models:
        spec = MODELS.get(model)
        # A model named explicitly but not part of the profile runs at its default batch size.
        batch_sizes = selection.batch_sizes or list(
            profile.batch_sizes(spec.batch_sizes) or spec.batch_sizes.get("default") or (1,)
        )
        no_weights = weights.unavailable_reason(spec)  # once per model, not once per case
        if mode == "data" and spec.task != IMAGE:  # eager's data case too, not only the loader techniques
            no_weights = f"the data pipeline feeds JPEG images; {spec.name} takes {spec.task} inputs"
        for device in selection.devices:
            absent = unavailable_reason(device)
            for batch_size in batch_sizes:
                for technique in techniques_on(device):
                    reason = absent or no_weights or resolve(technique).supports(spec, device, mode)
                    cases.append(Case(model, technique, device, batch_size, mode, skip_reason=reason))
    return cases
