"""The user's own images: a torchvision ImageFolder tree, with standard evaluation transforms.

Layout: DIR/<class>/<image> (everything is held-out data), or DIR/train/<class>/... plus
DIR/val/<class>/... (the user's own split; train is used for --weights trained).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch

from optbench.catalog.tasks.base import TaskData
from optbench.errors import UsageProblem

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def check_data_dir(path: Path) -> None:
    """One clear line for a data dir that cannot work, before any model is built."""
    if not path.exists():
        raise UsageProblem(f"--data-dir {path} does not exist")
    if not path.is_dir():
        raise UsageProblem(f"--data-dir {path} is not a folder")
    root = path / "val" if (path / "val").is_dir() else path
    classes = (
        [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")] if root.is_dir() else []
    )
    if not any(root.iterdir()):
        raise UsageProblem(f"--data-dir {path} is empty")
    if not classes:
        raise UsageProblem(f"--data-dir {root} has no class folders (expected {root}/<class>/<image>)")
    if not any(f.is_file() for c in classes for f in c.iterdir()):
        raise UsageProblem(f"--data-dir {root} has class folders but no images in them")


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
    check_data_dir(path)
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
        f"imagefolder:{path.resolve()}@{preprocess[1]}px", train_x, train_y, eval_x, eval_y, len(classes)
    )
