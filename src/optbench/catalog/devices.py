"""Which devices exist here, and how to wait for one."""

from __future__ import annotations

import torch

KNOWN_DEVICES = ("cpu", "cuda", "mps")


def available_devices() -> list[str]:
    found = ["cpu"]
    if torch.cuda.is_available():
        found.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return found


def unavailable_reason(device: str) -> str | None:
    if device in available_devices():
        return None
    if device == "cuda":
        return "cuda is not available here (torch.cuda.is_available() is False)"
    return f"{device} is not available here"


def synchronize(device: torch.device) -> None:
    """Block until queued kernels finish, so a timer measures the work and not its launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def device_name(device: str) -> str:
    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    if device == "cpu":
        from optbench.catalog.machine import cpu_model

        return cpu_model()
    return device
