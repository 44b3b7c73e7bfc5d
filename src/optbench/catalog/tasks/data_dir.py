"""What a --data-dir holds: image class folders (an ImageFolder tree), a text eval.jsonl, or both.
Each model reads the data of its kind; `check_data_dir` runs before any model is built."""

from __future__ import annotations

from pathlib import Path

from optbench.errors import UsageProblem

TEXT_EVAL = "eval.jsonl"
"""Held-out token ids and labels for text models (format: catalog/tasks/token_file.py)."""
TEXT_TRAIN = "train.jsonl"
"""The train split for text models under --weights trained (optional)."""


def image_root(path: Path) -> Path:
    """Where the held-out class folders are: DIR/val in a train/val layout, else DIR."""
    return path / "val" if (path / "val").is_dir() else path


def class_folders(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]


def has_images(path: Path) -> bool:
    """True when `path` holds class folders for image models."""
    return bool(class_folders(image_root(path)))


def has_text(path: Path) -> bool:
    """True when `path` holds held-out data for text models."""
    return (path / TEXT_EVAL).is_file()


def check_data_dir(path: Path) -> None:
    """One clear line for a data dir that cannot work, before any model is built."""
    if not path.exists():
        raise UsageProblem(f"--data-dir {path} does not exist")
    if not path.is_dir():
        raise UsageProblem(f"--data-dir {path} is not a folder")
    if not any(path.iterdir()):
        raise UsageProblem(f"--data-dir {path} is empty")
    if has_text(path) and not has_images(path):
        return  # text data only: image models stay on their embedded task
    root = image_root(path)
    classes = class_folders(root)
    if not classes:
        raise UsageProblem(
            f"--data-dir {root} has no class folders (expected {root}/<class>/<image>) and no "
            f"{TEXT_EVAL} for text models"
        )
    if not any(f.is_file() for c in classes for f in c.iterdir()):
        raise UsageProblem(f"--data-dir {root} has class folders but no images in them")
