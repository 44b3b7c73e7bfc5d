"""TaskData: a fixed train split and held-out split as tensors, with a fingerprint for caching."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from optbench.catalog.models import IMAGE, TEXT, ModelSpec


@dataclass(frozen=True)
class TaskData:
    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    eval_x: torch.Tensor
    eval_y: torch.Tensor
    num_classes: int

    @property
    def fingerprint(self) -> str:
        """Changes whenever the data or its preprocessing does: part of the checkpoint key."""
        h = hashlib.sha256(self.name.encode())
        for t in (self.train_x, self.train_y, self.eval_x, self.eval_y):
            h.update(str(tuple(t.shape)).encode())
            h.update(t.contiguous().numpy().tobytes())
        return h.hexdigest()[:16]


def task_for(spec: ModelSpec, data_dir: Path | None = None, preprocess: Any = None) -> TaskData:
    """The task a model is trained and evaluated on, at the model's task input shape. `preprocess`
    (resize, crop, mean, std) overrides the ImageNet convention for a --data-dir."""
    if spec.task == IMAGE:
        if data_dir is not None:
            from optbench.catalog.tasks.imagefolder import imagefolder_task

            return imagefolder_task(Path(data_dir), spec.task_resolution, preprocess)
        from optbench.catalog.tasks.digits import digits_task

        return digits_task(spec.task_resolution)
    if spec.task == TEXT:
        from optbench.catalog.tasks.marker_text import marker_text_task

        return marker_text_task(spec.task_seq_len, spec.vocab_size)
    raise ValueError(f"model {spec.name!r} has task {spec.task!r}, which has no evaluation data")
