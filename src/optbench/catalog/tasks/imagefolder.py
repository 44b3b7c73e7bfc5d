"""The user's own images: a torchvision ImageFolder tree, with standard evaluation transforms.

Layout: DIR/<class>/<image> (everything is held-out data), or DIR/train/<class>/... plus
DIR/val/<class>/... (the user's own split; train is used for --weights trained).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch

from optbench.catalog.tasks.base import TaskData
from optbench.catalog.tasks.data_dir import check_data_dir
from optbench.errors import UsageProblem

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


Preprocess = tuple[int, int, tuple[float, ...], tuple[float, ...]]
"""(resize side, center-crop side, mean, std): how a model's pretrained weights expect images."""


def default_preprocess(resolution: int) -> Preprocess:
    """The ImageNet convention: resize to 256/224 of the crop, center crop, ImageNet mean and std."""
    return int(round(resolution * 256 / 224)), resolution, tuple(IMAGENET_MEAN), tuple(IMAGENET_STD)


def _load(root: Path, preprocess: Preprocess) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    from torchvision import datasets, transforms

    resize, crop, mean, std = preprocess
    transform = transforms.Compose([
        transforms.Resize(resize),
        transforms.CenterCrop(crop),
        transforms.ToTensor(),
        transforms.Normalize(mean, std),
    ])  # fmt: skip
    folder = datasets.ImageFolder(str(root), transform=transform)
    xs, ys = zip(*(folder[i] for i in range(len(folder))), strict=True)
    return torch.stack(xs), torch.tensor(ys), folder.classes


@lru_cache(maxsize=8)
def imagefolder_task(path: Path, resolution: int, preprocess: Preprocess | None = None) -> TaskData:
    """The folder's images at `resolution`, preprocessed as `preprocess` says (default: the ImageNet
    convention at that resolution)."""
    check_data_dir(path)  # called directly too, not only through the --data-dir option
    preprocess = preprocess or default_preprocess(resolution)
    if (path / "val").is_dir():
        eval_x, eval_y, classes = _load(path / "val", preprocess)
        if (path / "train").is_dir():
            train_x, train_y, train_classes = _load(path / "train", preprocess)
            if train_classes != classes:
                raise UsageProblem(f"--data-dir {path}: train and val have different class folders")
        else:
            train_x, train_y = eval_x[:0], eval_y[:0]
    else:
        eval_x, eval_y, classes = _load(path, preprocess)
        train_x, train_y = eval_x[:0], eval_y[:0]
    return TaskData(
        f"imagefolder:{path.resolve()}@{preprocess[1]}px",
        train_x,
        train_y,
        eval_x,
        eval_y,
        len(classes),
        origin=str(path),
        classes=tuple(classes),
    )
