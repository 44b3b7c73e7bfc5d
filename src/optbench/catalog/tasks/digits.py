"""scikit-learn's bundled handwritten digits (1,797 real 8x8 images, 10 classes) as an image task."""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F

from optbench.catalog.tasks.base import TaskData

SPLIT_SEED = 0
HELD_OUT = 0.2


def split_digits(held_out: float) -> tuple[torch.Tensor, torch.Tensor, list[int], list[int]]:
    """The digits as (n, 8, 8) images in [0, 1], their labels, and a fixed stratified split into
    train and held-out indices."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32) / 16.0  # pixel values are 0..16
    labels = torch.tensor(digits.target, dtype=torch.long)
    train_idx, eval_idx = train_test_split(
        list(range(len(labels))), test_size=held_out, random_state=SPLIT_SEED, stratify=digits.target
    )
    return images, labels, train_idx, eval_idx


@lru_cache(maxsize=8)
def digits_task(resolution: int) -> TaskData:
    images, labels, train_idx, eval_idx = split_digits(HELD_OUT)

    def prepare(idx: list[int]) -> torch.Tensor:
        x = images[idx].unsqueeze(1)
        x = F.interpolate(x, size=(resolution, resolution), mode="bilinear", align_corners=False)
        x = (x - 0.5) / 0.5  # to [-1, 1]: same scale as normalized natural images
        return x.expand(-1, 3, -1, -1).contiguous()  # gray to the 3 channels image models expect

    return TaskData(
        name=f"digits-{resolution}px-seed{SPLIT_SEED}",
        train_x=prepare(train_idx),
        train_y=labels[train_idx],
        eval_x=prepare(eval_idx),
        eval_y=labels[eval_idx],
        num_classes=10,
    )
