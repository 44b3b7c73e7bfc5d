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

from optbench.catalog.allocator import (
    FIXED_BYTES,
    NAMES,
    OLD_GLIBC_BYTES,
    PRELOADED,
    fixed_bytes,
    malloc_is_glibcs,
    preloaded,
    sets_thresholds,
)
from optbench.catalog.allocator import settings as user_settings

__all__ = [
    "FIXED_BYTES", "MODES", "NAMES", "OLD_GLIBC_BYTES", "PRELOADED", "Allocator", "choose", "fixed_bytes",
    "user_settings",
]  # fmt: skip
"""The thresholds and their glibc rules are the catalog's (pytest bench/ --malloc fixes them too)."""

MODES = ("fixed", "inherit")
"""--malloc: `fixed` sets both thresholds in both sessions; `inherit` leaves glibc's adaptive ones."""


def _size(value: str) -> str:
    number = int(value)
    return f"{number >> 30} GiB" if number >= 1 << 30 else f"{number >> 20} MiB"


@dataclass(frozen=True)
class Allocator:
    """What both sessions run under, for their environment, gate.json and the run's first line."""

    mode: str
    """`fixed`, `inherit`, `user` (the caller's own thresholds kept), `preloaded` (another allocator
    replaces glibc's) or `not glibc` (nothing to set)."""
    added: dict[str, str] = field(default_factory=dict)
    """Variables optbench adds to both sessions' environment."""
    environment: dict[str, str] = field(default_factory=dict)
    """Every allocator variable both sessions see: the caller's and the added."""

    def describe(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self.environment.items())
        if self.mode == "fixed":
            size = _size(self.added[NAMES[0]])
            return f"glibc malloc's mmap and trim thresholds fixed at {size} in both sessions"
        if self.mode == "user":
            return f"the allocator settings in your environment, in both sessions ({shown})"
        if self.mode == "preloaded":
            return f"a preloaded allocator, in both sessions ({shown})"
        if self.mode == "not glibc":
            return "the C library is not glibc: its allocator runs with its own settings"
        return "glibc malloc's own adaptive thresholds (--malloc inherit)"

    def record(self) -> dict[str, object]:
        """gate.json's ab.allocator."""
        return {"mode": self.mode, "environment": dict(self.environment)}


def choose(mode: str, environ: Mapping[str, str], libc: tuple[str, str] | None = None) -> Allocator:
    """The settings for `--malloc mode`, given the C library (name, version; default this one's).
    What the caller already chose is kept as it is: their thresholds (overriding half of them would
    make a setting nobody asked for) or a preloaded allocator (glibc's settings would not apply)."""
    name, version = platform.libc_ver() if libc is None else libc
    own = user_settings(environ)
    if name != "glibc":
        return Allocator("not glibc", {}, own)
    # The sessions run this interpreter with this environment: an allocator interposed here under
    # a name PRELOADED does not know is interposed there too.
    if preloaded(environ) or (libc is None and not malloc_is_glibcs()):
        return Allocator("preloaded", {}, own)
    if sets_thresholds(environ):
        return Allocator("user", {}, own)
    if mode == "inherit":
        return Allocator("inherit", {}, own)
    size = str(fixed_bytes(version))
    added = dict.fromkeys(NAMES, size)
    return Allocator("fixed", added, {**own, **added})
