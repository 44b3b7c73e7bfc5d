"""A model's own weights (`--weights own`): the file or loader its spec names, loaded and checked
against the model the spec builds. Each problem is one line naming the model and the file."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from optbench.catalog.models import ModelSpec
from optbench.errors import UsageProblem


def own_weights_file(spec: ModelSpec) -> Path | None:
    """The file `spec.weights` names (a relative path from the folder of the file that registered
    the spec, else from the working folder), or None for a loader or no weights."""
    if spec.weights is None or callable(spec.weights):
        return None
    path = Path(spec.weights).expanduser()
    if not path.is_absolute():
        path = (Path(spec.source).parent if spec.source else Path.cwd()) / path
    return path


def describe_own(spec: ModelSpec) -> str:
    """The file, or the loader's name: how rows and error lines name these weights."""
    file = own_weights_file(spec)
    if file is not None:
        return str(file)
    return f"loader {getattr(spec.weights, '__qualname__', repr(spec.weights))}"


def check_own_weights_file(spec: ModelSpec) -> None:
    """Before the run: a named file that is missing is a usage error (as pretrained's is)."""
    file = own_weights_file(spec)
    if file is not None and not file.is_file():
        raise UsageProblem(f"--weights own: {spec.name}'s weights file {file} does not exist")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"[:300]


def load_own_state(spec: ModelSpec) -> dict[str, torch.Tensor]:
    """The state dict `spec.weights` gives: a file saved with torch.save(model.state_dict()) (or a
    checkpoint dict holding one under "state_dict"), or what its loader returns."""
    what = f"--weights own: {spec.name}'s weights {describe_own(spec)}"
    file = own_weights_file(spec)
    try:
        if file is None:
            found = spec.weights(spec)  # type: ignore[misc,operator]
        else:
            check_own_weights_file(spec)
            found = torch.load(file, map_location="cpu", weights_only=True)
    except UsageProblem:
        raise
    except Exception as error:
        raise UsageProblem(
            f"{what} could not be loaded ({_first_line(error)}); save model.state_dict() with "
            "torch.save, or name a loader"
        ) from None
    if isinstance(found, nn.Module):
        found = found.state_dict()
    if isinstance(found, Mapping) and isinstance(found.get("state_dict"), Mapping):
        found = found["state_dict"]
    if not isinstance(found, Mapping) or not all(isinstance(v, torch.Tensor) for v in found.values()):
        raise UsageProblem(f"{what} holds a {type(found).__name__}, not a state dict of tensors")
    return dict(found)


def misfit(spec: ModelSpec, error: RuntimeError) -> UsageProblem:
    """load_state_dict's many-line message (missing, unexpected keys, size mismatches) as one line."""
    details = [line.strip().rstrip(".") for line in str(error).splitlines()[1:] if line.strip()]
    summary = "; ".join(details) or str(error).strip()
    if len(summary) > 400:
        summary = summary[:400] + " ..."
    return UsageProblem(
        f"--weights own: {spec.name}'s weights {describe_own(spec)} do not fit the model its spec "
        f"builds: {summary}"
    )


def state_digest(state: Mapping[str, torch.Tensor]) -> str:
    """A digest of a state dict's names, shapes, dtypes and values: a cache key part for weights
    (a user's file, or what the techniques before one in a stack made of the weights)."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().cpu().contiguous()
        digest.update(f"{name}{tuple(tensor.shape)}{tensor.dtype}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()[:16]


def state_key(state: Mapping[str, torch.Tensor]) -> str:
    """Identifies the weights' values in techniques' cache keys: changes when the file does."""
    return f"own-{state_digest(state)}"
