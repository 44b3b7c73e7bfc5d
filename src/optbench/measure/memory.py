"""Peak memory of one case: the process's resident high-water mark on CPU, max allocated on CUDA."""

from __future__ import annotations

from pathlib import Path

import torch

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kb(field: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _return_free_memory() -> None:
    """Hand memory that earlier cases freed back to the OS (glibc keeps it in its heap otherwise), so
    this case's RSS high-water mark counts what it allocates, not what it reused: without it the
    first case of a group looked several times hungrier than the ones after it."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: the mark is coarser, not wrong


def _reset_rss_peak() -> bool:
    # Writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0), which gives a
    # per-case high-water mark without a sampling thread.
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


class PeakMemory:
    """Context manager; afterwards `.peak_mb`, `.delta_mb` (peak over the level at entry) and `.source`."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.peak_mb: float | None = None
        self.delta_mb: float | None = None
        self.source = ""
        self._start_mb: float | None = None

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._start_mb = torch.cuda.memory_allocated(self.device) / 2**20
            self.source = "cuda_max_allocated"
        elif _return_free_memory() is None and _reset_rss_peak():
            rss = _status_kb("VmRSS")
            self._start_mb = rss / 1024 if rss is not None else None
            self.source = "cpu_rss_peak"
        else:
            self.source = "cpu_rss_peak_unavailable"
        return self

    def read(self) -> None:
        """Record the peak so far (call before freeing the case's tensors)."""
        if self.device.type == "cuda":
            self.peak_mb = torch.cuda.max_memory_allocated(self.device) / 2**20
        elif self._start_mb is not None:
            hwm = _status_kb("VmHWM")
            self.peak_mb = hwm / 1024 if hwm is not None else None
        if self.peak_mb is not None and self._start_mb is not None:
            self.delta_mb = self.peak_mb - self._start_mb

    def __exit__(self, *exc: object) -> None:
        if self.peak_mb is None:
            self.read()
