"""What a technique may use while it prepares a model: the spec, the task's train split, the device,
the batch size and input shape it prepares for, a seed, a progress bar and a cache for expensive steps."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import torch

from optbench.catalog.models import ModelSpec
from optbench.catalog.tasks.base import TaskData
from optbench.errors import UsageProblem

T = TypeVar("T")


@dataclass
class TechniqueContext:
    spec: ModelSpec
    """The model's spec, at the input shape being prepared for."""
    device: torch.device
    batch_size: int
    input_shape: str
    """One sample's input shape the prepared object will be called at ('3x224x224', 'seq128')."""
    task: TaskData | None = None
    """The task the weights were trained on: its train split is the calibration and fine-tuning data."""
    seed: int = 0
    weights_key: str = ""
    """Identifies the weights the model was built with: part of every cache key."""
    cache_root: Path | None = None
    """Where cached preparations go (default: optbench's cache folder)."""
    progress_context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    show_progress: bool = True
    technique: str = ""
    technique_code: str = ""
    cache_log: list[bool] = field(default_factory=list)
    """One entry per `cached` call, True for a cache hit; shared by the parts of a stack."""
    calibration_samples: int = 256
    """Training samples a static quantization calibrates on (`--calibration-samples`)."""
    mode: str = "inference"
    """What the prepared object will do: inference (forward calls) or training (optimizer steps)."""

    def for_technique(self, name: str, code_hash: str) -> TechniqueContext:
        """The same context for one technique (of a stack): cache keys name the technique."""
        return replace(self, technique=name, technique_code=code_hash)

    @property
    def from_cache(self) -> bool | None:
        """True when every cached step came from the cache, False when any was computed, None if none."""
        return all(self.cache_log) if self.cache_log else None

    @property
    def has_train_split(self) -> bool:
        """Whether the weights come with a task that has training data (not --weights random)."""
        return self.task is not None and len(self.task.train_y) > 0

    def train_split(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The task's train inputs and labels (CPU tensors at the task's input shape)."""
        if not self.has_train_split:
            raise UsageProblem(
                f"{self.technique or 'this technique'} needs the task's train split: "
                "run with --weights trained (the default), or give --data-dir DIR/train/..."
            )
        return self.task.train_x, self.task.train_y

    def train_batches(
        self, samples: int | None = None, batch_size: int | None = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches of the first `samples` training examples, on the device, in a seeded shuffled order."""
        x, y = self.train_split()
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(self.seed))[:samples]
        size = batch_size or self.batch_size
        for i in range(0, len(order), size):
            idx = order[i : i + size]
            yield x[idx].to(self.device), y[idx].to(self.device)

    def calibration_batches(self, samples: int | None = None) -> Iterator[torch.Tensor]:
        """Inputs of the first `samples` (default: calibration_samples) seeded training examples, at
        the input shape being prepared for: task images are resized to a deployment resolution, so
        the activation ranges a quantizer observes are those of the shape it will run at. Weights
        with no task (--weights random) calibrate on seeded random inputs: speed only."""
        samples = samples or self.calibration_samples
        if not self.has_train_split:
            gen = torch.Generator().manual_seed(self.seed)
            for i in range(0, samples, self.batch_size):
                (x,) = self.spec.example_inputs(min(self.batch_size, samples - i), gen)[:1]
                yield x.to(self.device)
            return
        for x, _ in self.train_batches(samples):
            yield self._at_input_shape(x)

    def _at_input_shape(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4 and self.spec.resolution is not None and x.shape[-1] != self.spec.resolution:
            size = (self.spec.resolution, self.spec.resolution)
            return torch.nn.functional.interpolate(x, size=size, mode="bilinear", align_corners=False)
        return x

    def progress(self, items: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
        """Iterate `items` under a progress bar that reaches the terminal past pytest's capture."""
        from optbench.progress import progress_bar

        with self.progress_context():
            bar = progress_bar(total, desc, enabled=self.show_progress)
            for item in items:
                yield item
                bar.update(1)
            bar.close()

    def cached(
        self, name: str, compute: Callable[[], dict[str, torch.Tensor]], **key: Any
    ) -> dict[str, torch.Tensor]:
        """A state dict that is expensive to make (a fine-tune, a calibration's statistics), from the
        cache when this technique's code already made it from the same weights, data and seed.

        `key` adds whatever else the result depends on (sparsity, number of samples ...); batch size
        and input shape are not in the key unless you put them there, so other batch sizes reuse it."""
        from optbench.catalog.checkpoints import atomic_save, cache_dir

        parts = {
            "name": name,
            "technique": self.technique,
            "technique_code": self.technique_code,
            "model": self.spec.name,
            "model_code": self.spec.code_hash(),
            "weights": self.weights_key,
            "data": self.task.fingerprint if self.task is not None else "",
            "seed": self.seed,
            "torch": torch.__version__,
            "key": {k: repr(v) for k, v in sorted(key.items())},
        }
        digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
        path = (
            (self.cache_root or cache_dir())
            / "prepared"
            / f"{self.technique}-{self.spec.name}-{name}-{digest}.pt"
        )
        if path.exists():
            try:
                state = torch.load(path, map_location="cpu", weights_only=True)
                self.cache_log.append(True)
                return state
            except Exception:  # unreadable: compute it again and overwrite
                pass
        state = {k: v.detach().cpu().clone() for k, v in compute().items()}
        atomic_save(state, path)
        self.cache_log.append(False)
        return state
