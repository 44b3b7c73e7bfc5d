"""Which weights a case runs with: random (seeded), trained on the embedded task, or pretrained."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from optbench.modelspec import IMAGE, ModelSpec
from optbench.registry import UsageProblem
from optbench.tasks.base import TaskData

WEIGHT_CHOICES = ("random", "trained", "pretrained")
BUILD_SEED = 0


@dataclass
class ModelWeights:
    spec: ModelSpec
    """The spec at the input shape the model is timed and evaluated at."""
    state_dict: dict[str, torch.Tensor] | None
    """None: the seeded random initialisation."""
    task: TaskData | None
    """Held-out data to evaluate on (None: no evaluation for these weights)."""
    source: str
    record: dict[str, Any] = field(default_factory=dict)

    def eval_set(self, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The held-out inputs and labels, or their first `limit` (the split is shuffled and
        stratified, so a prefix keeps the classes balanced)."""
        assert self.task is not None
        return self.task.eval_x[:limit], self.task.eval_y[:limit]

    def build(self) -> torch.nn.Module:
        torch.manual_seed(BUILD_SEED)
        model = self.spec.build_model()
        if self.state_dict is not None:
            model.load_state_dict(self.state_dict)
        return model.eval()


def pretrained_weights_file(spec: ModelSpec) -> tuple[Any, Path]:
    """torchvision's default weights for a zoo model and where torch hub caches their file."""
    from torchvision.models import get_model_weights

    try:
        weights = get_model_weights(spec.name).DEFAULT
    except (ValueError, KeyError):
        raise UsageProblem(
            f"--weights pretrained: torchvision has no pretrained weights for {spec.name!r}"
        ) from None
    hub = Path(torch.hub.get_dir()) / "checkpoints"
    return weights, hub / Path(weights.url).name


class WeightsProvider:
    """Resolves each model's weights once per run (training or loading the cached checkpoint)."""

    def __init__(
        self,
        choice: str,
        data_dir: Path | None = None,
        cache_root: Path | None = None,
        progress_context: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
        progress: bool = True,
    ) -> None:
        if choice not in WEIGHT_CHOICES:
            raise UsageProblem(f"unknown weights {choice!r}; valid weights: {', '.join(WEIGHT_CHOICES)}")
        self.choice = choice
        self.data_dir = data_dir
        self.cache_root = cache_root
        # Lets the pytest plugin show training progress bars past output capture.
        self.show_progress = progress_context or contextlib.nullcontext
        self.progress = progress
        self._cache: dict[str, ModelWeights | Exception] = {}

    def input_spec(self, spec: ModelSpec) -> ModelSpec:
        """The spec at the input shape these weights run at, without training anything."""
        return spec.at_task_shape() if self.choice == "trained" else spec

    def get(self, spec: ModelSpec) -> ModelWeights:
        """Resolved once per model; a failure (no train split, say) is remembered and raised again
        for the model's other cases instead of training again."""
        if spec.name not in self._cache:
            try:
                self._cache[spec.name] = getattr(self, f"_{self.choice}")(spec)
            except Exception as error:
                self._cache[spec.name] = error
        found = self._cache[spec.name]
        if isinstance(found, Exception):
            raise found
        return found

    def _random(self, spec: ModelSpec) -> ModelWeights:
        return ModelWeights(spec, None, None, f"random (seed {BUILD_SEED})")

    def _trained(self, spec: ModelSpec) -> ModelWeights:
        from optbench.checkpoints import load_or_train
        from optbench.tasks import task_for
        from optbench.training import TRAIN_SEED, train

        spec = self.input_spec(spec)
        task = task_for(spec, self.data_dir)
        if task.num_classes != spec.num_classes:
            spec = replace(spec, num_classes=task.num_classes)

        def train_fn() -> tuple[torch.nn.Module, dict[str, Any]]:
            with self.show_progress():
                model, result = train(spec, task, TRAIN_SEED, progress=self.progress)
            return model, asdict(result)

        state, record = load_or_train(spec, task, TRAIN_SEED, train_fn, self.cache_root)
        return ModelWeights(
            spec, state, task, f"trained on {task.name} (cache {record['cache']}: {record['path']})", record
        )

    def _pretrained(self, spec: ModelSpec) -> ModelWeights:
        if spec.task != IMAGE:
            raise UsageProblem(
                f"--weights pretrained: {spec.name!r} is not a torchvision model with pretrained weights"
            )
        weights, file = pretrained_weights_file(spec)
        if not file.exists():
            raise UsageProblem(
                f"--weights pretrained: {spec.name} needs {file.name} in {file.parent} (no network here; "
                f"copy it there from a machine that has it)"
            )
        state = torch.load(file, map_location="cpu", weights_only=True)
        spec = replace(spec, num_classes=len(weights.meta["categories"]))
        task = None
        if self.data_dir is not None:
            from optbench.tasks import task_for

            task = task_for(spec, self.data_dir)
        return ModelWeights(spec, state, task, f"pretrained {weights} ({file})")
