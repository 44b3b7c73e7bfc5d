"""The memory allocator settings both of `optbench ab`'s sessions start with. No torch.

glibc's malloc serves a multi-megabyte buffer with mmap once it is above a threshold, and moves that
threshold as the process frees such buffers. A training step frees and reallocates many of them, so
each process settles into a fast regime (buffers reused from the heap) or a slow one (mapped and
faulted in anew every step). On identical code that moved the LSTM's training step by up to 25%
between two sessions and caused most of the gate's confirmations (docs/harness-honesty.md, "glibc's
allocator"; scripts/malloc_effect.py). Fixing the mmap and trim thresholds at start-up takes the
choice away from the process. Both sessions get the same settings, through their environment, so a
base commit whose optbench predates this module runs under them too.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import dataclass, field

FIXED_BYTES = 1 << 30
"""Both thresholds, 1 GiB: above any buffer of the project's models, so none is mapped per step."""
FIXED = {"MALLOC_MMAP_THRESHOLD_": str(FIXED_BYTES), "MALLOC_TRIM_THRESHOLD_": str(FIXED_BYTES)}
"""glibc's environment names for the two tunables (read once, when a process starts)."""
MODES = ("fixed", "default")
"""--malloc: `fixed` sets FIXED in both sessions; `default` leaves glibc's adaptive thresholds."""


def user_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The allocator settings already in the environment (MALLOC_* and GLIBC_TUNABLES)."""
    return {k: v for k, v in sorted(environ.items()) if k.startswith("MALLOC_") or k == "GLIBC_TUNABLES"}


@dataclass(frozen=True)
class Allocator:
    """What both sessions run under, for their environment, gate.json and the run's first line."""

    mode: str
    """`fixed`, `default`, `user` (the caller's own settings kept) or `not glibc` (nothing to set)."""
    added: dict[str, str] = field(default_factory=dict)
    """Variables optbench adds to both sessions' environment."""
    environment: dict[str, str] = field(default_factory=dict)
    """Every allocator variable both sessions see: the caller's and the added."""

    def describe(self) -> str:
        if self.mode == "fixed":
            return "glibc malloc's mmap and trim thresholds fixed at 1 GiB in both sessions"
        if self.mode == "user":
            shown = ", ".join(f"{k}={v}" for k, v in self.environment.items())
            return f"the allocator settings in your environment, in both sessions ({shown})"
        if self.mode == "not glibc":
            return "the C library is not glibc: its allocator runs with its own settings"
        return "glibc malloc's own adaptive thresholds (--malloc default)"

    def record(self) -> dict[str, object]:
        """gate.json's ab.allocator."""
        return {"mode": self.mode, "environment": dict(self.environment)}


def _sets_thresholds(environ: Mapping[str, str]) -> bool:
    tunables = environ.get("GLIBC_TUNABLES", "")
    return any(k in environ for k in FIXED) or "mmap_threshold" in tunables or "trim_threshold" in tunables


def choose(mode: str, environ: Mapping[str, str], libc: str | None = None) -> Allocator:
    """The settings for `--malloc mode`. Thresholds the caller already set are kept as they are: they
    are a choice, and overriding half of them would make a setting nobody asked for."""
    libc = platform.libc_ver()[0] if libc is None else libc
    own = user_settings(environ)
    if _sets_thresholds(environ):
        return Allocator("user", {}, own)
    if mode == "default":
        return Allocator("default", {}, own)
    if libc != "glibc":
        return Allocator("not glibc", {}, own)
    return Allocator("fixed", dict(FIXED), {**own, **FIXED})
