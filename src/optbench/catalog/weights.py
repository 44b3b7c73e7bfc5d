"""Which weights a case runs with: random (seeded), trained on the embedded task or --data-dir,
pretrained (torchvision), or the model's own (the file or loader its spec names)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from optbench.catalog.models import IMAGE, ModelSpec
from optbench.catalog.tasks.base import DEFAULT_IMAGE_TASK, TaskData, short_training_task
from optbench.errors import UsageProblem

WEIGHT_CHOICES = ("random", "trained", "pretrained", "own")
BUILD_SEED = 0


@dataclass
class ModelWeights:
    spec: ModelSpec
    """The model's spec at its deployment shape (with the task's number of classes)."""
    state_dict: dict[str, torch.Tensor] | None
    """None: the seeded random initialisation."""
    task: TaskData | None
    """Held-out data to evaluate on, at `eval_spec`'s shape (None: no evaluation for these weights)."""
    source: str
    record: dict[str, Any] = field(default_factory=dict)
    made_at: str = ""
    """The input shape the state dict belongs to (a shape-tied model built at another is adapted)."""
    eval_spec: ModelSpec | None = None
    """The spec at the shape the task's held-out split comes in (None: no evaluation)."""
    key: str = ""
    """Identifies these weights in cache keys of techniques that prepare from them."""
    accuracy_source: str = ""
    """Where the accuracy figures come from (the row's accuracy_source)."""
    converge_task: TaskData | None = None
    """What a training case's short training learns and is evaluated on (None: `task`)."""

    def eval_set(self, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The task's held-out inputs and labels, or their first `limit` (TaskData.eval_set)."""
        assert self.task is not None
        return self.task.eval_set(limit)

    def build(self, at: ModelSpec | None = None) -> torch.nn.Module:
        """The model built at `at`'s input shape (default: deployment) with these weights, in eval mode."""
        spec = at or self.spec
        torch.manual_seed(BUILD_SEED)
        model = spec.build_model()
        if self.state_dict is not None:
            state = self.state_dict
            if spec.shape_tied and spec.input_shape != self.made_at:
                if spec.adapt_weights is None:
                    raise UsageProblem(
                        f"{spec.name}'s weights are tied to its input shape ({self.made_at}) and its spec "
                        f"has no adapt_weights to run it at {spec.input_shape}: use --timing-shape task"
                    )
                # A copy: adapters may edit the dict they get (torchvision's interpolate_embeddings
                # does), and these weights are built again at the task shape for evaluation.
                state = spec.adapt_weights(dict(state), spec)
            model.load_state_dict(state)
        return model.eval()


def pretrained_weights_file(spec: ModelSpec, must_exist: bool = False) -> tuple[Any, Path]:
    """torchvision's default weights for a zoo model and where torch hub caches their file; with
    `must_exist`, a missing file is a UsageProblem naming the file and the folder."""
    from torchvision.models import get_model_weights

    try:
        weights = get_model_weights(spec.name).DEFAULT
    except (ValueError, KeyError):
        raise UsageProblem(
            f"--weights pretrained: torchvision has no pretrained weights for {spec.name!r}"
        ) from None
    file = Path(torch.hub.get_dir()) / "checkpoints" / Path(weights.url).name
    if must_exist and not file.exists():
        raise UsageProblem(
            f"--weights pretrained: {spec.name} needs {file.name} in {file.parent} (nothing is downloaded; "
            "copy the file there, or use --weights trained)"
        )
    return weights, file


def pretrained_preprocess(spec: ModelSpec) -> tuple[int, int, tuple[float, ...], tuple[float, ...]] | None:
    """(resize, crop, mean, std) of torchvision's default weights for `spec`, or None when it has none
    (text models, user models)."""
    if spec.task != IMAGE:
        return None
    from torchvision.models import get_model_weights

    try:
        transforms = get_model_weights(spec.name).DEFAULT.transforms()
    except (ValueError, KeyError, AttributeError):
        return None
    return (
        int(transforms.resize_size[0]),
        int(transforms.crop_size[0]),
        tuple(float(m) for m in transforms.mean),
        tuple(float(v) for v in transforms.std),
    )


class WeightsProvider:
    """Resolves each model's weights once per run (training or loading the cached checkpoint)."""

    def __init__(
        self,
        choice: str,
        data_dir: Path | None = None,
        cache_root: Path | None = None,
        progress_context: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
        progress: bool = True,
        image_task: str = DEFAULT_IMAGE_TASK,
    ) -> None:
        if choice not in WEIGHT_CHOICES:
            raise UsageProblem(f"unknown weights {choice!r}; valid weights: {', '.join(WEIGHT_CHOICES)}")
        self.choice = choice
        self.data_dir = data_dir
        self.cache_root = cache_root
        # Lets the pytest plugin show training progress bars past output capture.
        self.show_progress = progress_context or contextlib.nullcontext
        self.progress = progress
        self.image_task = image_task
        self._cache: dict[str, ModelWeights | Exception] = {}

    def eval_shape(self, spec: ModelSpec) -> str | None:
        """The input shape these weights are evaluated at, without training anything."""
        if self.choice in ("trained", "own"):
            return spec.task_input_shape
        if self.choice == "pretrained" and self.data_dir is not None:
            preprocess = pretrained_preprocess(spec)
            return f"3x{preprocess[1]}x{preprocess[1]}" if preprocess else None
        return None

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
        return ModelWeights(
            spec,
            None,
            None,
            f"random (seed {BUILD_SEED})",
            made_at=spec.input_shape,
            key=f"random-{BUILD_SEED}",
        )

    def _trained(self, spec: ModelSpec) -> ModelWeights:
        from optbench.catalog.checkpoint_training import TRAIN_SEED, train
        from optbench.catalog.checkpoints import load_or_train
        from optbench.catalog.tasks import task_for

        task = task_for(spec, self.data_dir, image_task=self.image_task)
        if task.num_classes != spec.num_classes:
            spec = replace(spec, num_classes=task.num_classes)
        at_task = spec.at_task_shape()  # trained and evaluated at the task's shape

        def train_fn() -> tuple[torch.nn.Module, dict[str, Any]]:
            with self.show_progress():
                model, result = train(at_task, task, TRAIN_SEED, progress=self.progress)
            return model, asdict(result)

        state, record = load_or_train(at_task, task, TRAIN_SEED, train_fn, self.cache_root)
        return ModelWeights(
            spec,
            state,
            task,
            f"trained on {task.name} (cache {record['cache']}: {record['path']})",
            record,
            made_at=at_task.input_shape,
            eval_spec=at_task,
            key=Path(record["path"]).stem,
            accuracy_source=accuracy_source(task, "trained weights"),
            converge_task=short_training_task(at_task, task, self.image_task),
        )

    def unavailable_reason(self, spec: ModelSpec) -> str | None:
        """Why these weights do not exist for `spec` (a skipped case), or None."""
        if self.choice == "pretrained" and pretrained_preprocess(spec) is None:
            return f"--weights pretrained: torchvision has no pretrained weights for {spec.name}"
        if self.choice == "own" and spec.weights is None:
            return f"--weights own: {spec.name}'s spec names no weights of its own (its weights=)"
        return None

    def _pretrained(self, spec: ModelSpec) -> ModelWeights:
        reason = self.unavailable_reason(spec)
        if reason:
            raise UsageProblem(reason)
        weights, file = pretrained_weights_file(spec, must_exist=True)
        state = torch.load(file, map_location="cpu", weights_only=True)
        preprocess = pretrained_preprocess(spec)
        assert preprocess is not None
        # Timed and evaluated at the weights' own crop size, with their own resize and normalization.
        crop = preprocess[1]
        spec = replace(
            spec, num_classes=len(weights.meta["categories"]), resolution=crop, task_resolution=crop
        )
        task, eval_spec = None, None
        if self.data_dir is not None:
            from optbench.catalog.tasks import task_for

            eval_spec = spec
            task = task_for(eval_spec, self.data_dir, preprocess, self.image_task)
            task = to_categories(task, list(weights.meta["categories"]), f"{spec.name}'s {weights}")
        return ModelWeights(
            spec,
            state,
            task,
            f"pretrained {weights} ({file})",
            made_at=spec.input_shape,
            eval_spec=eval_spec,
            key=file.name,
            accuracy_source=accuracy_source(task, "pretrained weights") if task else "",
        )

    def _own(self, spec: ModelSpec) -> ModelWeights:
        from optbench.catalog.own_weights import describe_own, load_own_state, misfit, state_key
        from optbench.catalog.tasks import task_for

        reason = self.unavailable_reason(spec)
        if reason:
            raise UsageProblem(reason)
        state = load_own_state(spec)
        task = task_for(spec, self.data_dir, image_task=self.image_task)
        at_task = spec.at_task_shape()  # evaluated where trained weights are; timed at deployment
        weights = ModelWeights(
            spec,
            state,
            task,
            f"own ({describe_own(spec)})",
            made_at=spec.input_shape,
            eval_spec=at_task,
            key=state_key(state),
            accuracy_source=accuracy_source(task, f"own weights ({describe_own(spec)})", always=True),
            converge_task=short_training_task(at_task, task, self.image_task),
        )
        try:
            model = weights.build(at_task)
        except RuntimeError as error:  # missing or unexpected keys, size mismatches
            raise misfit(spec, error) from None
        with torch.no_grad():  # one held-out sample tells how many classes the model outputs
            outputs = model(task.eval_x[:1]).shape[-1]
        task.check_outputs(spec.name, int(outputs))
        return weights


def to_categories(task: TaskData, categories: list[str], weights: str) -> TaskData:
    """`task` with its labels as indices into the pretrained weights' `categories`, matched by class
    folder name: label i of an ImageFolder is its i-th folder, not the weights' i-th class. A folder
    not named after a category is one line, not a wrong accuracy."""
    index = {name: i for i, name in reversed(list(enumerate(categories)))}  # duplicates: the first
    unknown = [name for name in task.classes if name not in index]
    if not task.classes:
        raise UsageProblem(
            f"--weights pretrained: {weights} outputs {len(categories)} classes, and {task.where} has no "
            "class names to match them with: give --data-dir an ImageFolder named after its categories"
        )
    if unknown:
        shown = ", ".join(repr(n) for n in unknown[:3]) + (" ..." if len(unknown) > 3 else "")
        raise UsageProblem(
            f"--weights pretrained: {weights} outputs {len(categories)} classes, and {task.where}'s "
            f"class folders {shown} are not among them: name each folder after one of its categories "
            f"(e.g. {categories[0]!r}), or use --weights own or trained"
        )
    mapping = torch.tensor([index[name] for name in task.classes])
    return replace(
        task,
        train_y=mapping[task.train_y],
        eval_y=mapping[task.eval_y],
        num_classes=len(categories),
        classes=tuple(categories),
    )


def accuracy_source(task: TaskData, weights: str, always: bool = False) -> str:
    """The user's data and `weights`, or the embedded task (naming `weights` too with `always`)."""
    if task.origin:
        return f"your data ({task.origin}), {weights}"
    return f"the embedded task ({task.name})" + (f", {weights}" if always else "")
