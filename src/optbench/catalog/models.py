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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import nn

from optbench.catalog.registry import Registry
from optbench.errors import UnknownNameError, UsageProblem

# Batch sizes a model runs at in each profile, unless its spec says otherwise. A model without an
# entry for a profile is not part of that profile.
DEFAULT_BATCH_SIZES: dict[str, tuple[int, ...]] = {"smoke": (2,), "default": (8,), "full": (1, 8, 32)}

SHAPES = ("deploy", "task")
"""--timing-shape: time at the deployment shape (default) or at the task shape."""


def check_shape(which: str) -> None:
    """A UnknownNameError unless `which` is a timing shape (deploy, task)."""
    if which not in SHAPES:
        raise UnknownNameError(f"unknown timing shape {which!r}; valid timing shapes: {', '.join(SHAPES)}")


OwnWeights = str | Path | Callable[["ModelSpec"], "Mapping[str, torch.Tensor] | nn.Module"]
"""A spec's own weights: a file saved with torch.save(model.state_dict(), path), or a loader callable."""

IMAGE = "image_classification"
TEXT = "text_classification"


@dataclass(frozen=True)
class TrainRecipe:
    """How the zoo trains a model on its task for `--weights trained` (seeded, deterministic on CPU)."""

    target_top1: float = 0.9
    """Stop once held-out top-1 reaches this; the README states it per model."""
    max_epochs: int = 10
    lr: float = 1e-3
    batch_size: int = 64
    weight_decay: float = 1e-4
    train_samples: int | None = None
    """Train on only the first N samples of the train split (big models on 2 CPU cores)."""
    autocast: str | None = None
    """Train the forward pass under torch.autocast in this dtype ('bfloat16'); weights stay fp32.
    About twice as fast for the transformers on a CPU with bf16 instructions."""
    task_epochs: int | None = None
    """Epochs on a task that sets the training length itself (the hard digits: 4), for a model that
    needs longer to learn it; None: the task's."""
    clip_grad_norm: float | None = None
    """Clip the gradients' global norm to this before each step (training and pruning's fine-tune);
    None: no clipping. A ViT from scratch needs it to learn at a useful rate (docs/accuracy.md)."""
    fresh_views: bool = False
    """Train each epoch after the first on new random views of the same training samples, where the
    task can draw them (the hard digits; elsewhere the stored split, every epoch). A ViT from
    scratch overfits the stored views in 16 epochs; new ones keep it learning (docs/accuracy.md)."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    task: str
    build: Callable[..., nn.Module]
    """build(num_classes) -> a model with random (seeded by the caller) weights. A builder that
    takes `resolution=` (or `seq_len=`) gets the spec's: its weights are tied to the input shape,
    as ViT's position embeddings are, and it is built anew for each shape (see `adapt_weights`)."""
    make_inputs: Callable[[ModelSpec, int, torch.Generator], tuple[torch.Tensor, ...]]
    """make_inputs(spec, batch_size, generator) -> CPU tensors for one forward call."""
    num_classes: int = 10
    resolution: int | None = None
    """Deployment image side: the shape the model is timed at (`--timing-shape deploy`)."""
    seq_len: int | None = None
    """Deployment tokens per sequence: the shape the model is timed at."""
    batch_sizes: dict[str, tuple[int, ...]] = field(default_factory=lambda: dict(DEFAULT_BATCH_SIZES))
    tags: frozenset[str] = frozenset()
    task_resolution: int | None = None
    """Image side the model is trained and evaluated at on its task (default: `resolution`)."""
    task_seq_len: int | None = None
    """Tokens per sequence the model is trained and evaluated at on its task (default: `seq_len`)."""
    adapt_weights: Callable[[dict[str, torch.Tensor], ModelSpec], dict[str, torch.Tensor]] | None = None
    """adapt_weights(state_dict, spec) -> the state dict for a model built at `spec`'s shape, for a
    shape-tied model (ViT: interpolate the position embeddings, as torchvision does to fine-tune at a
    new resolution)."""
    vocab_size: int | None = None
    recipe: TrainRecipe = field(default_factory=TrainRecipe)
    source: str = ""
    """File that registered the spec; its hash is the model's code hash in the results."""
    weights: OwnWeights | None = None
    """The model's own weights, used by `--weights own`: a state dict file (a relative path is read
    from the folder of the file that registered the spec), or a loader(spec) returning a state dict
    or a module whose state dict fits `build`."""

    @property
    def input_shape(self) -> str:
        """One sample's input shape, without the batch dimension: '3x224x224' or 'seq128'."""
        if self.resolution is not None:
            return f"3x{self.resolution}x{self.resolution}"
        if self.seq_len is not None:
            return f"seq{self.seq_len}"
        return ""

    @property
    def task_input_shape(self) -> str:
        return self.at_task_shape().input_shape

    @property
    def shape_tied(self) -> bool:
        """True when the builder takes the input shape: one built model serves one shape only."""
        return bool(self._shape_kwargs())

    def _shape_kwargs(self) -> dict[str, int]:
        params = inspect.signature(self.build).parameters
        given = {"resolution": self.resolution, "seq_len": self.seq_len}
        return {k: v for k, v in given.items() if k in params and v is not None}

    def build_model(self) -> nn.Module:
        return self.build(self.num_classes, **self._shape_kwargs())

    def example_inputs(self, batch_size: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        return self.make_inputs(self, batch_size, gen)

    def at_task_shape(self) -> ModelSpec:
        """This spec with its inputs at the task's shape (what it trains and is evaluated at)."""
        return replace(
            self,
            resolution=self.task_resolution or self.resolution,
            seq_len=self.task_seq_len or self.seq_len,
        )

    def at_shape(self, which: str) -> ModelSpec:
        """'deploy': this spec; 'task': at its task shape."""
        check_shape(which)
        return self if which == "deploy" else self.at_task_shape()

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


def _image_inputs(spec: ModelSpec, batch_size: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    assert spec.resolution is not None
    return (torch.randn(batch_size, 3, spec.resolution, spec.resolution, generator=gen),)


def _token_inputs(spec: ModelSpec, batch_size: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    assert spec.seq_len is not None and spec.vocab_size is not None
    return (torch.randint(0, spec.vocab_size, (batch_size, spec.seq_len), generator=gen),)


def image_classifier(
    name: str,
    build: Callable[[int], nn.Module],
    resolution: int = 224,
    num_classes: int = 10,
    batch_sizes: dict[str, tuple[int, ...]] | None = None,
    tags: Iterable[str] = (),
    task_resolution: int | None = None,
    recipe: TrainRecipe | None = None,
    adapt_weights: Callable[[dict[str, torch.Tensor], ModelSpec], dict[str, torch.Tensor]] | None = None,
    weights: OwnWeights | None = None,
) -> ModelSpec:
    """Spec for a model taking a float image batch (N, 3, H, W), timed at `resolution` (its
    deployment shape) and trained and evaluated at `task_resolution` (default: the same). `build` may
    take `resolution=` too (models with fixed-size inputs, like ViT); then give `adapt_weights`.
    `weights`: the model's own weights for `--weights own` (see ModelSpec.weights)."""

    return ModelSpec(
        name=name,
        task=IMAGE,
        build=build,
        make_inputs=_image_inputs,
        num_classes=num_classes,
        resolution=resolution,
        task_resolution=task_resolution or resolution,
        batch_sizes=dict(batch_sizes or DEFAULT_BATCH_SIZES),
        tags=frozenset(tags) | {"image"},
        recipe=recipe or TrainRecipe(),
        adapt_weights=adapt_weights,
        source=inspect.stack()[1].filename,
        weights=weights,
    )


def text_classifier(
    name: str,
    build: Callable[[int], nn.Module],
    seq_len: int,
    vocab_size: int,
    num_classes: int = 10,
    batch_sizes: dict[str, tuple[int, ...]] | None = None,
    tags: Iterable[str] = (),
    task_seq_len: int | None = None,
    recipe: TrainRecipe | None = None,
    weights: OwnWeights | None = None,
) -> ModelSpec:
    """Spec for a model taking token ids (N, seq_len) in [0, vocab_size), timed at `seq_len` (its
    deployment shape) and trained and evaluated at `task_seq_len` (default: the same). `weights`: the
    model's own weights for `--weights own` (see ModelSpec.weights)."""

    return ModelSpec(
        name=name,
        task=TEXT,
        build=build,
        make_inputs=_token_inputs,
        num_classes=num_classes,
        seq_len=seq_len,
        task_seq_len=task_seq_len or seq_len,
        vocab_size=vocab_size,
        batch_sizes=dict(batch_sizes or DEFAULT_BATCH_SIZES),
        tags=frozenset(tags) | {"text"},
        recipe=recipe or TrainRecipe(),
        source=inspect.stack()[1].filename,
        weights=weights,
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


def is_zoo_model(name: str) -> bool:
    """True for a model the zoo that ships with optbench registers."""
    origin = MODELS.origin(name)
    return bool(origin) and Path(origin).resolve().parent == zoo_dir()


ENTRY_POINT_GROUP = "optbench.plugins"
"""Installed packages register models and techniques here: each entry point names a module that
registers them on import, or a callable that does when called."""


def load_entry_points() -> list[str]:
    """Import every `optbench.plugins` entry point of the installed packages; returns their names."""
    from importlib.metadata import entry_points

    loaded = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            target = point.load()
            if callable(target):
                target()
        except Exception as error:
            raise UsageProblem(
                f"could not load the optbench plugin {point.name!r} ({point.value}): {type(error).__name__}: {error}"
            ) from error
        loaded.append(point.name)
    return loaded


def load_user_dir(directory: Path) -> list[str]:
    """Import a user's folder (models/ or techniques/): each file registers its own specs or
    techniques. A folder with an `__init__.py` is imported as a package, so its files may use relative
    imports. Returns the files imported. The zoo's own folder is skipped (already loaded)."""
    directory = Path(directory).resolve()
    if directory == zoo_dir():
        return []
    tag = hashlib.sha1(str(directory).encode()).hexdigest()[:8]
    if (directory / "__init__.py").exists():
        return _load_user_package(directory, f"optbench_user_{tag}_{directory.name}")
    loaded = []
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


def _load_user_package(directory: Path, package: str) -> list[str]:
    """The folder as package `package`, then each of its modules (registering as they import)."""
    import pkgutil

    loaded = []
    try:
        if package not in sys.modules:
            spec = importlib.util.spec_from_file_location(
                package, directory / "__init__.py", submodule_search_locations=[str(directory)]
            )
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[package] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[package]
                raise
            loaded.append("__init__.py")
        for info in sorted(pkgutil.iter_modules([str(directory)]), key=lambda i: i.name):
            if not info.name.startswith("_") and f"{package}.{info.name}" not in sys.modules:
                importlib.import_module(f"{package}.{info.name}")
                loaded.append(f"{info.name}.py")
    except UsageProblem:
        raise
    except Exception as error:
        raise UsageProblem(f"could not load {directory}: {type(error).__name__}: {error}") from error
    return loaded
