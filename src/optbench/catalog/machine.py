"""Context recorded with every row: versions, threads, the hardware (CPU capability and ISA flags, GPU
compute capability), the machine fingerprint, git sha. Anything that cannot be read is "unknown"."""

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


UNKNOWN = "unknown"
ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "amx_tile")
"""The /proc/cpuinfo flags that decide which CPU kernels run: AVX-512, VNNI (int8 dot products), native
bf16, AMX. Machines of one kind can differ in them (AVX2-only Zen 3 beside AVX-512 Zen 4)."""


def _cpuinfo_field(name: str) -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == name:
                return value.strip()
    except OSError:
        pass
    return None


@cache
def cpu_isa() -> str:
    """The ISA flags of ISA_FLAGS this CPU has, space-separated ('' for none), or 'unknown'."""
    flags = _cpuinfo_field("flags")
    if flags is None:
        return UNKNOWN
    have = set(flags.split())
    return " ".join(f for f in ISA_FLAGS if f in have)


@cache
def cpu_id() -> str:
    """'family/model/stepping' from /proc/cpuinfo, or 'unknown'."""
    parts = [_cpuinfo_field(k) for k in ("cpu family", "model", "stepping")]
    return "/".join(parts) if all(parts) else UNKNOWN  # type: ignore[arg-type]


@cache
def cpu_capability() -> str:
    """The CPU capability torch dispatches its kernels for (AVX2, AVX512, ...), or 'unknown'."""
    try:
        import torch

        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # an old torch, or a platform it does not know
        return UNKNOWN


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


FINGERPRINTED = (
    "cpu",
    "cores",
    "memory_gb",
    "cuda_device",
    "cuda_capability",
    "cpu_capability",
    "cpu_isa",
    "cpu_id",
)
"""What makes two machines alike. The ISA is in: two CPUs both named "AMD EPYC" may run different
kernels (AVX2 against AVX-512), so their ceilings, checkpoints and absolute latencies differ."""


SPEED_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "KMP_AFFINITY")
"""Environment variables that change speed without changing code, besides the allocator's
(catalog.allocator.settings: MALLOC_*, GLIBC_TUNABLES, LD_PRELOAD): thread counts."""


def speed_environment() -> dict[str, str]:
    """The allocator's settings and the SPEED_VARIABLES this process runs with (the run manifest's
    `environment`): a run with its allocator tuned is not comparable with one without."""
    from optbench.catalog.allocator import settings

    threads = {k: v for k, v in os.environ.items() if k in SPEED_VARIABLES}
    return dict(sorted({**settings(os.environ), **threads}.items()))


def fingerprint(info: dict[str, str]) -> str:
    """A short hash of the FINGERPRINTED facts of `info` (machine_info's keys)."""
    return hashlib.sha256("|".join(info.get(k, "") for k in FINGERPRINTED).encode()).hexdigest()[:12]


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
        "cuda_capability": cuda_capability(),
        "cpu_capability": cpu_capability(),
        "cpu_isa": cpu_isa(),
        "cpu_id": cpu_id(),
    }
    info["fingerprint"] = fingerprint(info)
    return info


@cache
def cuda_capability() -> str:
    """The first CUDA device's compute capability ('9.0'), '' without CUDA."""
    try:
        import torch

        if not torch.cuda.is_available():
            return ""
        major, minor = torch.cuda.get_device_capability(0)
        return f"{major}.{minor}"
    except Exception:
        return UNKNOWN
