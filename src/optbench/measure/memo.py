"""Held-out evaluations and short trainings kept across runs, so a warm run does not redo them.

Both are deterministic work whose result depends only on what runs and what it runs on. The key
holds all of it: optbench's catalog and measure sources and the model's own file (any edit makes a
new key), the weights, the technique, the shapes and batch sizes, a digest of the input tensors,
torch's version and the machine's fingerprint (its ISA decides which int8 and bf16 kernels run, and
so the logits). Timing is never reused. `--fresh-evaluations` turns reuse off for a run. A gated
run reuses nothing, unless `optbench ab` named the code its session runs (RunState.memo_tree, in
every key then: a session reuses only what exactly its own code made).
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

import torch

import optbench

FOLDER = "evaluations"
"""Below the cache folder (catalog.checkpoints.cache_dir, or the run's own cache root)."""


@cache
def code_digest() -> str:
    """A digest of every source file of optbench's catalog and measure packages."""
    root = Path(optbench.__file__).resolve().parent
    digest = hashlib.sha256()
    for package in ("catalog", "measure"):
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def tensor_digest(tensor: torch.Tensor) -> str:
    """A digest of a tensor's shape, dtype and values."""
    data = tensor.detach().cpu().contiguous()
    digest = hashlib.sha256(f"{tuple(data.shape)}|{data.dtype}".encode())
    digest.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return digest.hexdigest()[:16]


@cache
def _machine() -> str:
    from optbench.catalog.machine import fingerprint, machine_info

    return fingerprint(machine_info())


def key(**parts: Any) -> str:
    """The key of one result: `parts` (what the caller's result depends on) with the code, torch's
    version and the machine's fingerprint."""
    every = {**{k: repr(v) for k, v in parts.items()}, "code": code_digest(), "torch": torch.__version__}
    every["machine"] = _machine()
    return hashlib.sha256(json.dumps(every, sort_keys=True).encode()).hexdigest()[:20]


class Memo:
    """The results one run may reuse and adds to, in `root`/evaluations (root None: none)."""

    def __init__(self, root: Path | None) -> None:
        self.folder = None if root is None else root / FOLDER

    def load(self, name: str) -> dict[str, Any] | None:
        """The result stored under `name` (a key), or None; an unreadable file counts as absent."""
        if self.folder is None:
            return None
        path = self.folder / f"{name}.pt"
        try:
            return torch.load(path, weights_only=True)
        except FileNotFoundError:
            return None
        except Exception:  # a torn or foreign file: measured again and overwritten
            return None

    def save(self, name: str, result: dict[str, Any]) -> None:
        """Store `result` (tensors and plain values) under `name`; a cache that cannot be written
        costs the next run its reuse, never this run its row."""
        from optbench.catalog.checkpoints import atomic_save

        if self.folder is None:
            return
        try:
            atomic_save(result, self.folder / f"{name}.pt")
        except OSError:
            return
