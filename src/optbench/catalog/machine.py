"""Context recorded with every row: versions, threads, machine fingerprint, git sha."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from functools import cache
from importlib import metadata
from pathlib import Path


@cache
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""


@cache
def git_sha(cwd: str | None = None) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5
        )
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def _total_memory_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return 0.0


@cache
def machine_info() -> dict[str, str]:
    """Facts that decide whether two runs' absolute numbers are comparable at all."""
    import torch

    cores = os.cpu_count() or 0
    info = {
        "cpu": cpu_model(),
        "cores": str(cores),
        "memory_gb": f"{_total_memory_gb():.0f}",
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": _version("torchvision"),
        "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "",
    }
    key = "|".join(info[k] for k in ("cpu", "cores", "memory_gb", "cuda_device"))
    info["fingerprint"] = hashlib.sha256(key.encode()).hexdigest()[:12]
    return info
