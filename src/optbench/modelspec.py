"""ModelSpec: how to build a model and its example inputs. Models know nothing of techniques.

A model is registered by one file in a models/ folder that calls `register_model(...)`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import pkgutil
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from optbench.registry import Registry, UsageProblem

# Batch sizes a model runs at in each profile, unless its spec says otherwise. A model without an
# entry for a profile is not part of that profile.
DEFAULT_BATCH_SIZES: dict[str, tuple[int, ...]] = {"smoke": (2,), "default": (8,), "full": (1, 8, 32)}

IMAGE = "image_classification"
TEXT = "text_classification"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    task: str
    build: Callable[[int], nn.Module]
    """build(num_classes) -> a model with random (seeded by the caller) weights."""
    make_inputs: Callable[[int, torch.Generator], tuple[torch.Tensor, ...]]
    """make_inputs(batch_size, generator) -> CPU tensors for one forward call."""
    num_classes: int = 10
    resolution: int | None = None
    seq_len: int | None = None
    batch_sizes: dict[str, tuple[int, ...]] = field(default_factory=lambda: dict(DEFAULT_BATCH_SIZES))
    tags: frozenset[str] = frozenset()
    source: str = ""
    """File that registered the spec; its hash is the model's code hash in the results."""

    @property
    def input_shape(self) -> str:
        """One sample's input shape, without the batch dimension: '3x224x224' or 'seq128'."""
        if self.resolution is not None:
            return f"3x{self.resolution}x{self.resolution}"
        if self.seq_len is not None:
            return f"seq{self.seq_len}"
        return ""

    def code_hash(self) -> str:
        return file_hash(self.source)

    def in_profile(self, profile: str) -> bool:
        return bool(self.batch_sizes.get(profile))


def file_hash(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]
    except OSError:
        return ""


MODELS: Registry[ModelSpec] = Registry("model")


def register_model(spec: ModelSpec) -> ModelSpec:
    if not spec.source:
        caller = inspect.stack()[1].filename
        spec = ModelSpec(**{**spec.__dict__, "source": caller})
    return MODELS.add(spec.name, spec, origin=spec.source)


def image_classifier(
    name: str,
    build: Callable[[int], nn.Module],
    resolution: int = 224,
    num_classes: int = 10,
    batch_sizes: dict[str, tuple[int, ...]] | None = None,
    tags: Iterable[str] = (),
) -> ModelSpec:
    """Spec for a model taking a float image batch (N, 3, H, W)."""

    def make_inputs(batch_size: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        return (torch.randn(batch_size, 3, resolution, resolution, generator=gen),)

    return ModelSpec(
        name=name,
        task=IMAGE,
        build=build,
        make_inputs=make_inputs,
        num_classes=num_classes,
        resolution=resolution,
        batch_sizes=dict(batch_sizes or DEFAULT_BATCH_SIZES),
        tags=frozenset(tags) | {"image"},
        source=inspect.stack()[1].filename,
    )


def text_classifier(
    name: str,
    build: Callable[[int], nn.Module],
    seq_len: int,
    vocab_size: int,
    num_classes: int = 10,
    batch_sizes: dict[str, tuple[int, ...]] | None = None,
    tags: Iterable[str] = (),
) -> ModelSpec:
    """Spec for a model taking token ids (N, seq_len) in [0, vocab_size)."""

    def make_inputs(batch_size: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        return (torch.randint(0, vocab_size, (batch_size, seq_len), generator=gen),)

    return ModelSpec(
        name=name,
        task=TEXT,
        build=build,
        make_inputs=make_inputs,
        num_classes=num_classes,
        seq_len=seq_len,
        batch_sizes=dict(batch_sizes or DEFAULT_BATCH_SIZES),
        tags=frozenset(tags) | {"text"},
        source=inspect.stack()[1].filename,
    )


def load_zoo() -> None:
    """Import every model file of the zoo that ships with optbench (the repository's models/ folder)."""
    import optbench.zoo as zoo

    for info in sorted(pkgutil.iter_modules(zoo.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"optbench.zoo.{info.name}")


def zoo_dir() -> Path:
    import optbench.zoo as zoo

    return Path(next(iter(zoo.__path__))).resolve()


def load_user_dir(directory: Path) -> list[str]:
    """Import every `*.py` file in a user's folder (models/ or techniques/); each registers its own
    specs or techniques. Returns the files imported. The zoo's own folder is skipped (already loaded)."""
    directory = Path(directory).resolve()
    if directory == zoo_dir():
        return []
    loaded = []
    tag = hashlib.sha1(str(directory).encode()).hexdigest()[:8]
    for path in sorted(directory.glob("*.py")):
        if path.name.startswith("_"):
            continue
        module_name = f"optbench_user_{tag}_{path.stem}"
        if module_name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as error:
            del sys.modules[module_name]
            raise UsageProblem(f"could not load {path}: {type(error).__name__}: {error}") from error
        loaded.append(path.name)
    return loaded
