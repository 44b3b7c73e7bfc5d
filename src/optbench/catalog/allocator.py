"""glibc malloc's thresholds: the values optbench fixes, and fixing them in this process. No torch.

glibc serves a buffer above its mmap threshold with mmap, and moves that threshold as the process
frees such buffers. A training step frees and reallocates many multi-megabyte buffers, so a process
settles into a fast regime (buffers reused from the heap) or a slow one (mapped and faulted in anew at
every step), by its history alone: up to 25% of the LSTM's training step between two processes of
identical code (docs/harness-honesty.md, "glibc's allocator"). Fixing both thresholds takes the
choice away. `optbench ab` does it through both sessions' environment; `pytest bench/` does it in its
own process, before any model is built, by default (`--malloc auto`; `fixed` insists, `inherit` opts out).
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Mapping

FIXED_BYTES = 1 << 30
"""Both thresholds, 1 GiB: above any buffer of the project's models, so none is mapped per step."""
OLD_GLIBC_BYTES = 1 << 25
"""Before glibc 2.35 a larger mmap threshold than 32 MiB (half its heap size) is ignored silently,
and the trim threshold alone would pin the mmap threshold at 128 KiB: there both are 32 MiB."""
NAMES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
"""glibc's environment names for the two tunables (read once, when a process starts)."""
PRELOADED = ("jemalloc", "tcmalloc", "mimalloc", "hoard", "tbbmalloc")
"""Allocators that replace glibc's malloc when preloaded (LD_PRELOAD): glibc's settings do nothing."""
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
"""mallopt's parameter numbers (glibc's malloc.h)."""


def settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The allocator settings in `environ`: every MALLOC_*, GLIBC_TUNABLES and LD_PRELOAD. The one
    filter behind `optbench ab`'s sessions, the gate's ledger and every run's recorded environment."""
    return {
        k: v
        for k, v in sorted(environ.items())
        if k.startswith("MALLOC_") or k in ("GLIBC_TUNABLES", "LD_PRELOAD")
    }


def fixed_bytes(version: str) -> int:
    """The threshold for glibc `version` ('2.36'): FIXED_BYTES from 2.35, OLD_GLIBC_BYTES before."""
    try:
        major, minor = (int(part) for part in version.split(".")[:2])
    except ValueError:
        return OLD_GLIBC_BYTES  # unknown: the value every glibc accepts
    return FIXED_BYTES if (major, minor) >= (2, 35) else OLD_GLIBC_BYTES


def preloaded(environ: Mapping[str, str]) -> str | None:
    """The allocator LD_PRELOAD puts in glibc's place, or None."""
    preload = environ.get("LD_PRELOAD", "")
    return preload if any(name in preload for name in PRELOADED) else None


def sets_thresholds(environ: Mapping[str, str]) -> bool:
    """Whether `environ` sets glibc malloc's thresholds itself (MALLOC_* or GLIBC_TUNABLES)."""
    tunables = environ.get("GLIBC_TUNABLES", "")
    return any(k in environ for k in NAMES) or "mmap_threshold" in tunables or "trim_threshold" in tunables


def malloc_is_glibcs() -> bool:
    """Whether this process's `malloc` is glibc's own. An allocator preloaded or linked in under any
    name (not only those in PRELOADED) comes first in the global symbol search, so the address the
    process resolves differs from the one in libc itself. True where that cannot be read."""
    try:
        default = ctypes.cast(ctypes.CDLL(None).malloc, ctypes.c_void_p).value
        own = ctypes.cast(ctypes.CDLL("libc.so.6").malloc, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return True
    return default == own


def unavailable(
    environ: Mapping[str, str] | None = None, libc: str | None = None, glibc_malloc: bool | None = None
) -> str | None:
    """Why the thresholds cannot be fixed, in words, or None when they can. Defaults: this process's
    environment, C library and malloc (malloc_is_glibcs)."""
    environ = os.environ if environ is None else environ
    name = platform.libc_ver()[0] if libc is None else libc
    if name != "glibc":
        return f"the C library is {name or 'not glibc'}, and the thresholds are glibc malloc's"
    other = preloaded(environ)
    if other:
        return f"LD_PRELOAD={other} replaces glibc's malloc, so its thresholds do nothing"
    if not (malloc_is_glibcs() if glibc_malloc is None else glibc_malloc):
        return "this process's malloc is not glibc's (an allocator preloaded or linked in), so its thresholds do nothing"
    return None


def auto_choice(
    environ: Mapping[str, str], in_ab_session: bool, libc: str | None = None, glibc_malloc: bool | None = None
) -> tuple[str, str]:
    """`--malloc auto`: (`fixed` or `inherit`, why). Fixed where glibc's own malloc runs with its
    defaults; left alone where the caller chose (MALLOC_* or GLIBC_TUNABLES thresholds, another
    allocator), where it cannot be fixed, and in `optbench ab`'s sessions, which `ab` starts with the
    allocator it chose (--malloc there) through their environment."""
    if in_ab_session:
        return "inherit", "optbench ab chose the allocator of its sessions"
    reason = unavailable(environ, libc, glibc_malloc)
    if reason:
        return "inherit", reason
    if sets_thresholds(environ):
        return "inherit", "the environment sets glibc malloc's thresholds"
    return "fixed", "glibc malloc's own thresholds, fixed so the run cannot settle into a regime of its own"


def fix_thresholds() -> int:
    """Fix both thresholds in this process (mallopt) and return the bytes; raises RuntimeError, with
    the reason in words, where that cannot be done (unavailable(), or a mallopt that refuses).
    Buffers allocated from now on follow the fixed thresholds."""
    reason = unavailable()
    if reason:
        raise RuntimeError(reason)
    version = platform.libc_ver()[1]
    size = fixed_bytes(version)
    libc = ctypes.CDLL(None)
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    for option in (_M_MMAP_THRESHOLD, _M_TRIM_THRESHOLD):
        if libc.mallopt(option, size) != 1:
            raise RuntimeError(f"glibc {version} refused mallopt({option}, {size})")
    return size
