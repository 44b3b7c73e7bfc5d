"""The on-disk JPEG dataset the data-pipeline cases read: made once from the two photos that ship with
scikit-learn, at realistic sizes (256 to 500 pixels a side), cached outside the repository. A user's
own ImageFolder tree can stand in for it (--pipeline-data DIR)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from optbench.errors import UsageProblem

CLASSES = 10
SIDES = (256, 500)
QUALITY = 90
VERSION = 1
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".webp", ".tif", ".tiff")
_DONE = ".complete"


def generated_dataset(images: int, cache_root: Path | None = None) -> Path:
    """The folder of `images` JPEGs in CLASSES class folders (made now if not cached). Each class
    crops its own band of one of the two photos, resized to a random size within SIDES; seeded."""
    from optbench.catalog.checkpoints import cache_dir

    root = (cache_root or cache_dir()) / "datasets" / f"jpeg-v{VERSION}-{images}"
    if (root / _DONE).exists():
        return root
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images  # china.jpg and flower.jpg, 427x640
    rng = np.random.default_rng(0)
    tmp = root.with_name(f"{root.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    for i in range(images):
        label = i % CLASSES
        photo = photos[label % 2]
        height, width = photo.shape[:2]
        band = height // (CLASSES // 2)
        top = (label // 2) * band
        left = int(rng.integers(0, width // 3))
        crop = photo[top : top + band + height // 3, left : left + width // 2]
        side = int(rng.integers(SIDES[0], SIDES[1] + 1))
        aspect = float(rng.uniform(0.75, 4 / 3))
        size = (side, min(SIDES[1], max(SIDES[0], int(side * aspect))))
        folder = tmp / f"class_{label:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(crop).resize(size).save(folder / f"{i:05d}.jpg", quality=QUALITY)
    (tmp / _DONE).write_text(f"{images} images\n")
    try:
        tmp.rename(root)
    except OSError:  # another process made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def check_image_folder(path: Path, option: str = "--pipeline-data") -> None:
    """One clear line for a folder that is not an ImageFolder tree with images in it."""
    if not path.exists():
        raise UsageProblem(f"{option} {path} does not exist")
    if not path.is_dir():
        raise UsageProblem(f"{option} {path} is not a folder")
    classes = [p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")]
    if not classes:
        raise UsageProblem(f"{option} {path} has no class folders (expected {path}/<class>/<image>.jpg)")
    if not any(f.suffix.lower() in IMAGE_SUFFIXES for c in classes for f in c.iterdir() if f.is_file()):
        raise UsageProblem(
            f"{option} {path} holds no images ({', '.join(IMAGE_SUFFIXES)}) in its class folders"
        )
