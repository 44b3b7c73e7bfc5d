"""TaskData: a fixed train split and held-out split as tensors, with a fingerprint for caching."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from optbench.catalog.models import IMAGE, TEXT, ModelSpec
from optbench.errors import UsageProblem


@dataclass(frozen=True)
class TaskData:
    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    eval_x: torch.Tensor
    eval_y: torch.Tensor
    num_classes: int
    origin: str = ""
    """The user's data this came from (--data-dir, or its eval.jsonl); empty for an embedded task."""
    classes_exact: bool = True
    """True: the data has exactly `num_classes` classes (class folders, the embedded tasks), so a
    model must output that many. False: labels are class indices and `num_classes` is one more than
    the largest seen, so a model must output at least that many."""
    classes: tuple[str, ...] = ()
    """Class names, where the data has them (an ImageFolder's class folders): label i is classes[i]."""
    epochs: int | None = None
    """Train zoo models for exactly this many epochs here (no early stop at the recipe's target
    top-1, which is set for the plain digits task); None: the recipe decides."""
    train_views: Callable[[int], torch.Tensor] | None = None
    """train_views(k) -> the k-th (k >= 1) set of new random views of the train split's samples, in
    train_x's order and shape (train_y holds for them): for a recipe that asks for fresh views each
    epoch (`TrainRecipe.fresh_views`). None: the task has only its stored views. Not part of the
    fingerprint: the views come from the code that makes train_x, which is."""

    def eval_set(self, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The held-out inputs and labels, or their first `limit` (the split is shuffled and
        stratified, so a prefix keeps the classes balanced)."""
        return self.eval_x[:limit], self.eval_y[:limit]

    @property
    def where(self) -> str:
        """Names the data in accuracy_source and in error lines."""
        return self.origin or f"the embedded task {self.name}"

    def check_outputs(self, model: str, outputs: int) -> None:
        """One line, instead of a wrong accuracy, when `model`'s outputs do not fit these classes."""
        if self.classes_exact and outputs != self.num_classes:
            raise UsageProblem(
                f"{model} outputs {outputs} classes but {self.where} has {self.num_classes} classes"
            )
        if not self.classes_exact and outputs < self.num_classes:
            raise UsageProblem(
                f"{model} outputs {outputs} classes but {self.where} has labels up to {self.num_classes - 1}"
            )

    @property
    def fingerprint(self) -> str:
        """Changes whenever the data or its preprocessing does: part of the checkpoint key."""
        h = hashlib.sha256(self.name.encode())
        for t in (self.train_x, self.train_y, self.eval_x, self.eval_y):
            h.update(str(tuple(t.shape)).encode())
            h.update(t.contiguous().numpy().tobytes())
        return h.hexdigest()[:16]


IMAGE_TASKS = ("hard_digits", "digits")
"""The embedded image tasks: hard_digits (not saturated; default and full profiles) and digits (the
plain, saturated one: fast, for the smoke profile's harness check)."""
DEFAULT_IMAGE_TASK = IMAGE_TASKS[0]


SHORT_TRAINING_IMAGE_TASK = "digits"
"""The embedded image task a training case's short training learns, whatever the profile's image
task: from scratch in 50 steps, resnet50, MobileNetV3, EfficientNet-B0 and ViT-B/16 stay at chance
on hard_digits, so the check could not tell a technique that learns from one that does not."""


def short_training_task(spec: ModelSpec, task: TaskData, image_task: str = DEFAULT_IMAGE_TASK) -> TaskData:
    """The task of a training case's short training: `task` itself (the user's data, the text task),
    except that an embedded image task gives way to the plain digits at the same shape."""
    if spec.task != IMAGE or task.origin or image_task == SHORT_TRAINING_IMAGE_TASK:
        return task
    return task_for(spec, image_task=SHORT_TRAINING_IMAGE_TASK)


def task_for(
    spec: ModelSpec,
    data_dir: Path | None = None,
    preprocess: Any = None,
    image_task: str = DEFAULT_IMAGE_TASK,
) -> TaskData:
    """The task a model is trained and evaluated on, at the model's task input shape: the user's
    `data_dir` where it holds data of the model's kind, else the embedded task. `preprocess`
    (resize, crop, mean, std) overrides the ImageNet convention for a --data-dir."""
    from optbench.catalog.tasks.data_dir import has_images, has_text

    # A --data-dir without data of the model's kind leaves it on its embedded task; accuracy_source
    # says which it was.
    if spec.task == IMAGE:
        if data_dir is not None and has_images(Path(data_dir)):
            from optbench.catalog.tasks.imagefolder import imagefolder_task

            return imagefolder_task(Path(data_dir), spec.task_resolution, preprocess)
        assert spec.task_resolution is not None
        if image_task == "digits":
            from optbench.catalog.tasks.digits import digits_task

            return digits_task(spec.task_resolution)
        if image_task == "hard_digits":
            from optbench.catalog.tasks.hard_digits import hard_digits_task

            return hard_digits_task(spec.task_resolution)
        raise UsageProblem(f"unknown image task {image_task!r}; valid image tasks: {', '.join(IMAGE_TASKS)}")
    if spec.task == TEXT:
        if data_dir is not None and has_text(Path(data_dir)):
            from optbench.catalog.tasks.token_file import token_file_task

            assert spec.task_seq_len is not None and spec.vocab_size is not None
            return token_file_task(Path(data_dir), spec.task_seq_len, spec.vocab_size, spec.name)
        from optbench.catalog.tasks.marker_text import marker_text_task

        return marker_text_task(spec.task_seq_len, spec.vocab_size)
    raise ValueError(f"model {spec.name!r} has task {spec.task!r}, which has no evaluation data")
