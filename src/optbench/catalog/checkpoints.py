"""Trained-weights cache outside the repository, keyed by everything that changes the weights."""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

from optbench.catalog.checkpoint_training import train_code_hash
from optbench.catalog.hardware import train_autocast
from optbench.catalog.models import ModelSpec
from optbench.catalog.tasks.base import TaskData


def cache_dir() -> Path:
    """$OPTBENCH_CACHE, else $XDG_CACHE_HOME/optbench, else ~/.cache/optbench."""
    if os.environ.get("OPTBENCH_CACHE"):
        return Path(os.environ["OPTBENCH_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "optbench"


def checkpoint_key(spec: ModelSpec, task: TaskData, seed: int) -> str:
    import torchvision

    parts = {
        "model": spec.name,
        "model_code": spec.code_hash(),
        "input": spec.input_shape,
        "recipe": asdict(spec.recipe),
        "train_code": train_code_hash(),  # how it trains: layout, clipping, schedule
        "autocast": train_autocast(spec.recipe.autocast),  # fp32 on a CPU without native bf16
        "data": task.fingerprint,
        "task_epochs": task.epochs,  # a task may set the training length
        "seed": seed,
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def checkpoint_path(spec: ModelSpec, task: TaskData, seed: int, root: Path | None = None) -> Path:
    return (root or cache_dir()) / "checkpoints" / f"{spec.name}-{checkpoint_key(spec, task, seed)}.pt"


def load_or_train(
    spec: ModelSpec,
    task: TaskData,
    seed: int,
    train_fn: Callable[[], tuple[nn.Module, dict[str, Any]]],
    root: Path | None = None,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The cached state dict and its training record, training (and caching) it first if needed.

    A corrupt or truncated checkpoint, or one that loads but does not fit the model (its code changed
    in a file the key does not cover), is reported with a warning and retrained."""
    path = checkpoint_path(spec, task, seed, root)
    if path.exists():
        try:
            blob = torch.load(path, map_location="cpu", weights_only=True)
            state = blob["state_dict"]
            _fits(spec, state)
            return state, {**blob["meta"], "cache": "hit", "path": str(path)}
        except Exception as error:  # unusable for any reason: retrain rather than stop the run
            message = str(error).strip().splitlines()[0] if str(error).strip() else ""
            kept = path.with_suffix(".unusable")
            os.replace(path, kept)  # kept for inspection, never overwritten by the retrained one
            warnings.warn(
                f"checkpoint {path} is unusable ({type(error).__name__}: {message}); moved to {kept.name}, "
                "retraining",
                stacklevel=2,
            )
    model, meta = train_fn()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    atomic_save({"state_dict": state, "meta": meta}, path)
    return state, {**meta, "cache": "miss", "path": str(path)}


def _fits(spec: ModelSpec, state: dict[str, torch.Tensor]) -> None:
    """Raise when `state` does not load into the model `spec` builds (names or shapes differ)."""
    with torch.device("meta"):  # no memory, no initialisation: only names and shapes are checked
        model = spec.build_model()
    model.load_state_dict(state, assign=True)


def atomic_save(obj: Any, path: Path) -> None:
    """torch.save to `path` so that an interrupted save never leaves a truncated file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save(obj, tmp)
    os.replace(tmp, path)
