"""Input-pipeline settings as techniques of the data family: each changes one DataLoader or dataset
setting, and they stack like any technique (`workers_2+persistent_workers+decode_jpeg`). The baseline
(eager) is the plain loader: num_workers=0, PIL decoding, augmentation on, shuffled."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from optbench.catalog.models import IMAGE, ModelSpec
from optbench.catalog.techniques.base import (
    DATA,
    LevelTechnique,
    NotApplicable,
    Technique,
    register_levels,
    register_technique,
)
from optbench.catalog.techniques.stack import register_default_stack


def available_cores() -> int:
    """CPU cores this process may run on (the affinity mask, which containers and Slurm set)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


@dataclass(frozen=True)
class LoaderSettings:
    """One point of the sweep: what the DataLoader and the dataset are built with."""

    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    """Batches each worker loads ahead (None: DataLoader's default, 2 with workers)."""
    shuffle: bool = True
    augment: bool = True
    """RandomResizedCrop + flip (torchvision.transforms.v2); off: resize + center crop."""
    decoder: str = "pil"
    """pil (PIL.Image, ImageFolder's default loader) or torchvision (torchvision.io.decode_jpeg)."""


class DataTechnique(Technique):
    family = "data"
    modes = frozenset({DATA})

    def supports(self, spec: ModelSpec, device: str, mode: str) -> str | None:
        reason = super().supports(spec, device, mode)
        if reason is None and spec.task != IMAGE:
            return f"the data pipeline reads JPEG images; {spec.name} takes {spec.task} inputs"
        return reason

    def configure(self, settings: LoaderSettings) -> LoaderSettings:
        raise NotImplementedError


class _NeedsWorkers(DataTechnique):
    standalone = False  # meaningless with num_workers=0: in the default matrix only inside stacks

    def _check(self, settings: LoaderSettings) -> None:
        if settings.num_workers == 0:
            raise NotApplicable(f"{self.name} needs worker processes: stack it after workers_<N>")


class Workers(LevelTechnique, DataTechnique):
    prefix = "workers"
    api = "DataLoader(num_workers=N)"
    describe = "{percent} DataLoader worker processes decode and augment in parallel"

    def configure(self, settings: LoaderSettings) -> LoaderSettings:
        return replace(settings, num_workers=self.percent)  # the level is a count of workers


class Prefetch(LevelTechnique, _NeedsWorkers):
    prefix = "prefetch"
    api = "DataLoader(prefetch_factor=N)"
    describe = "each worker keeps {percent} batches ready"

    def configure(self, settings: LoaderSettings) -> LoaderSettings:
        self._check(settings)
        return replace(settings, prefetch_factor=self.percent)


@register_technique
class PinMemory(DataTechnique):
    name = "pin_memory"
    api = "DataLoader(pin_memory=True)"
    description = "batches in page-locked memory, copied to the GPU with non_blocking=True"

    def configure(self, settings: LoaderSettings) -> LoaderSettings:
        return replace(settings, pin_memory=True)


@register_technique
class PersistentWorkers(_NeedsWorkers):
    name = "persistent_workers"
    api = "DataLoader(persistent_workers=True)"
    description = "workers survive the end of an epoch instead of being started again"

    def configure(self, settings: LoaderSettings) -> LoaderSettings:
        self._check(settings)
        return replace(settings, persistent_workers=True)


@register_technique
class DecodeJpeg(DataTechnique):
    name = "decode_jpeg"
    api = "torchvision.io.decode_jpeg"
    description = "decode with torchvision.io.decode_jpeg (libjpeg-turbo into a tensor) instead of PIL"

    def configure(self, settings: LoaderSettings) -> LoaderSettings:
        return replace(settings, decoder="torchvision")


@register_technique
class NoAugment(DataTechnique):
    name = "no_augment"
    api = "transforms.v2 Resize + CenterCrop"
    description = "no random augmentation: resize and center crop only (what augmentation costs)"

    def configure(self, settings: LoaderSettings) -> LoaderSettings:
        return replace(settings, augment=False)


@register_technique
class NoShuffle(DataTechnique):
    name = "no_shuffle"
    api = "DataLoader(shuffle=False)"
    description = "read the files in order (what shuffling costs on this disk)"

    def configure(self, settings: LoaderSettings) -> LoaderSettings:
        return replace(settings, shuffle=False)


def worker_levels(cores: int) -> tuple[int, ...]:
    """0 (the baseline) up to the cores available: 1, 2, 4 ... and the core count itself, at most 8
    levels' worth (a 64-core machine sweeps 1, 2, 4, 8, 16, 32, 64)."""
    levels, n = [], 1
    while n < cores:
        levels.append(n)
        n *= 2
    return tuple(dict.fromkeys([*levels, cores]))


CORES = available_cores()
register_levels(Workers, defaults=worker_levels(CORES), low=0, high=1024, meaning="number of workers")
register_levels(Prefetch, defaults=(4,), low=1, high=1024, meaning="batches prefetched per worker")

_ALL = f"workers_{CORES}"
for _stack in (
    f"{_ALL}+pin_memory",
    f"{_ALL}+persistent_workers",
    f"{_ALL}+prefetch_4",
    f"{_ALL}+decode_jpeg",
    f"{_ALL}+persistent_workers+decode_jpeg",
):
    register_default_stack(_stack, {"cpu", "cuda", "mps"})
