"""Stacks: registered techniques composed in order (`channels_last+bf16_autocast+compile`).

A stack is a case like any single technique. Which stacks join the default matrix, per device, is
registered here too, so a user's file can add its own with `register_default_stack`.
"""

from __future__ import annotations

from functools import cache

from optbench.catalog.models import ModelSpec
from optbench.catalog.techniques.base import TECHNIQUES, Prepared, Technique, register_level_name
from optbench.catalog.techniques.context import TechniqueContext
from optbench.errors import UnknownNameError, UsageProblem

SEPARATOR = "+"
BASELINE = "eager"


class Stack(Technique):
    """Several techniques applied one after the other to the same model."""

    family = "stack"

    def __init__(self, parts: tuple[Technique, ...]) -> None:
        self.parts = parts
        self.name = SEPARATOR.join(p.name for p in parts)  # type: ignore[misc]
        self.devices = frozenset.intersection(*(p.devices for p in parts))  # type: ignore[misc]
        self.hardware = tuple(dict.fromkeys(n for p in parts for n in p.hardware))  # type: ignore[misc]
        self.modes = frozenset.intersection(*(p.modes for p in parts))  # type: ignore[misc]
        self.api = " + ".join(p.api for p in parts)  # type: ignore[misc]
        self.description = " then ".join(p.name for p in parts)  # type: ignore[misc]
        self.shape_specific = any(p.shape_specific for p in parts)  # type: ignore[misc]
        self.preparations = max(p.preparations for p in parts)  # type: ignore[misc]

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.family for p in self.parts))

    def supports(self, spec: ModelSpec, device: str, mode: str) -> str | None:
        for part in self.parts:
            reason = part.supports(spec, device, mode)
            if reason:
                return f"{part.name} (part of {self.name}): {reason}"
        for i, first in enumerate(self.parts):
            for second in self.parts[i + 1 :]:
                reason = first.conflict(second) or second.conflict(first)
                if reason:
                    return f"{first.name} conflicts with {second.name} in {self.name}: {reason}"
        return None

    def apply(self, prepared: Prepared, ctx: TechniqueContext) -> Prepared:
        for part in self.parts:
            prepared = part.apply(prepared, ctx.for_technique(part.name, part.code_hash()))
        return prepared

    def code_hash(self) -> str:
        return "+".join(p.code_hash() for p in self.parts)


@cache
def _stack(names: tuple[str, ...]) -> Stack:
    return Stack(tuple(TECHNIQUES.get(n) for n in names))


def resolve(name: str) -> Technique:
    """A registered technique, or the stack its '+'-joined name describes."""
    if SEPARATOR not in name:
        register_level_name(name)
        return TECHNIQUES.get(name)
    check(name)
    return _stack(tuple(name.split(SEPARATOR)))


def check(name: str) -> None:
    """Raise a UsageProblem naming the valid techniques for an unknown, repeated or empty part."""
    for part in name.split(SEPARATOR):
        register_level_name(part.strip())
    valid = f"valid techniques: {', '.join(TECHNIQUES.names())} (join them with '+' to stack them)"
    parts = name.split(SEPARATOR)
    if any(not p.strip() for p in parts):
        raise UsageProblem(f"technique stack {name!r} has an empty part; {valid}")
    unknown = [p for p in parts if p not in TECHNIQUES]
    if unknown:
        raise UnknownNameError(f"unknown technique {', '.join(map(repr, unknown))} in {name!r}; {valid}")
    repeated = sorted({p for p in parts if parts.count(p) > 1})
    if repeated:
        raise UsageProblem(f"technique stack {name!r} repeats {', '.join(map(repr, repeated))}; {valid}")
    if len(parts) > 1 and BASELINE in parts:
        raise UsageProblem(f"technique stack {name!r} includes {BASELINE!r}, the baseline itself; {valid}")


DEFAULT_STACKS: dict[str, frozenset[str]] = {}
"""Stack name -> devices whose default matrix includes it."""


def register_default_stack(name: str, devices: set[str] | frozenset[str]) -> None:
    """Put a stack into the default matrix (no --techniques given) on these devices."""
    DEFAULT_STACKS[name] = frozenset(devices)


def default_techniques(device: str, mode: str = "inference") -> list[str]:
    """Every registered technique that has `mode` and stands alone, then the default stacks for
    `device` whose parts all have `mode`."""
    singles = [n for n in TECHNIQUES.names() if _has_mode(n, mode) and TECHNIQUES.get(n).standalone]
    return singles + [s for s, devices in DEFAULT_STACKS.items() if device in devices and _has_mode(s, mode)]


def profile_techniques(names: tuple[str, ...], device: str, mode: str) -> list[str]:
    """A profile's own technique list on `device` in `mode`: its techniques with this mode, and its
    stacks whose parts all have it; a default stack (tied to devices) only on its devices."""
    every = default_techniques(device, mode)
    return [
        n for n in names if n in every or (SEPARATOR in n and n not in DEFAULT_STACKS and _has_mode(n, mode))
    ]


def _has_mode(name: str, mode: str) -> bool:
    return all(mode in TECHNIQUES.get(part).modes for part in name.split(SEPARATOR) if part in TECHNIQUES)


# The stacks users deploy: NHWC with reduced precision, then compiled on top.
register_default_stack("channels_last+bf16_autocast", {"cpu"})
register_default_stack("channels_last+bf16_autocast+compile", {"cpu"})
register_default_stack("channels_last+fp16_autocast", {"cuda"})
register_default_stack("channels_last+fp16_autocast+compile", {"cuda"})


def check_techniques(names: list[str]) -> None:
    """Raise a UsageProblem for every unknown technique name, or a bad stack, in `names`."""
    for name in names:
        if SEPARATOR not in name:
            register_level_name(name)
    TECHNIQUES.check([n for n in names if SEPARATOR not in n])
    for name in names:
        if SEPARATOR in name:
            check(name)
