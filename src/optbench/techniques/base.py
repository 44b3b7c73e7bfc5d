"""Technique: one optimization, applied to a built model. Techniques know nothing of pytest or results."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from optbench.modelspec import ModelSpec, file_hash
from optbench.registry import Registry

FAMILIES = ("baseline", "precision", "layout", "compile", "quantization", "pruning", "training", "data")
ALL_DEVICES = frozenset({"cpu", "cuda", "mps"})


@dataclass
class Prepared:
    """What a technique hands back: the callable to time, with the inputs to call it with."""

    forward: Callable[..., Any]
    inputs: tuple[Any, ...]
    module: nn.Module
    """The module whose weights the technique produced (for size and parameter counts)."""
    dtype: str = "float32"
    api: str = ""
    adapt_inputs: Callable[[tuple[Any, ...]], tuple[Any, ...]] = lambda inputs: inputs
    """Applied to evaluation batches the way the technique changed `inputs` (e.g. channels_last)."""


class Technique:
    name: ClassVar[str]
    family: ClassVar[str]
    devices: ClassVar[frozenset[str]] = ALL_DEVICES
    modes: ClassVar[frozenset[str]] = frozenset({"inference"})
    api: ClassVar[str] = ""
    """The API that produced the result, e.g. 'torch.autocast' or 'torch.ao.quantization'."""
    description: ClassVar[str] = ""

    def supports(self, spec: ModelSpec, device: str, mode: str) -> str | None:
        """None when the technique applies, else the reason it does not (shown as the skip reason)."""
        if device not in self.devices:
            return f"{self.name} does not run on {device} (runs on: {', '.join(sorted(self.devices))})"
        if mode not in self.modes:
            return f"{self.name} has no {mode} mode (modes: {', '.join(sorted(self.modes))})"
        return None

    def apply(self, model: nn.Module, inputs: tuple[torch.Tensor, ...], device: torch.device) -> Prepared:
        """Prepare `model` (already on `device`, in eval mode for inference) for fast calls."""
        raise NotImplementedError

    def code_hash(self) -> str:
        return file_hash(inspect.getfile(type(self)))


TECHNIQUES: Registry[Technique] = Registry("technique")


def register_technique(cls: type[Technique]) -> type[Technique]:
    """Class decorator: register one instance of the technique under its name."""
    if cls.family not in FAMILIES:
        raise ValueError(f"technique {cls.name!r} has unknown family {cls.family!r}; families: {FAMILIES}")
    TECHNIQUES.add(cls.name, cls(), origin=inspect.getfile(cls))
    return cls
