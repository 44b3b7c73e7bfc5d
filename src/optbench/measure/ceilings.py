"""This machine's dense compute ceilings, measured once per machine fingerprint and cached.

A row's `pct_of_peak` is its achieved GFLOP/s over the ceiling for its compute dtype. The ceiling is
the best of several GEMM sizes and convolutions (oneDNN's convolutions can beat its GEMM), so a row
above 100% means the ceiling missed a faster kernel: measure more workloads, never clip the row.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

GEMM_SIZES = {"cpu": (1024, 2048, 3072), "cuda": (4096, 8192)}
MIN_RUN_S = 0.3
PASSES = 2
VERSION = 2


def compute_dtype(dtype: str, device: str, tf32: bool | None = None) -> str:
    """The dtype that does most of a row's arithmetic: the ceiling it is compared with."""
    # A row's dtype is 'bfloat16 (autocast)', 'int8', 'float32 (...)': its first word names it.
    first = dtype.split()[0] if dtype else ""
    if first in ("int8", "bfloat16", "float16"):
        return first
    return "tfloat32" if device == "cuda" and tf32 else "float32"


def tf32_enabled() -> bool:
    """TF32 allowed for CUDA matmuls or cuDNN convolutions (cuDNN allows it by default)."""
    return bool(
        torch.backends.cuda.matmul.allow_tf32
        or torch.get_float32_matmul_precision() != "highest"
        or torch.backends.cudnn.allow_tf32
    )


def _gflops(fn: Callable[[], object], flops: float) -> float:
    """Best-case GFLOP/s of `fn`: a ceiling is what the kernel reaches at its best, so the fastest
    block of calls counts, not the median (on a shared machine the median drifts by tens of percent)."""
    from torch.utils import benchmark

    fn()  # first call: kernel selection, allocation
    timer = benchmark.Timer("fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return flops / min(timer.blocked_autorange(min_run_time=MIN_RUN_S).times) / 1e9


def _gemm(n: int, dtype: torch.dtype, device: str) -> Callable[[], float]:
    if dtype == torch.int8:
        a = torch.randint(-100, 100, (n, n), dtype=torch.int8, device=device)
        b = torch.randint(-100, 100, (n, n), dtype=torch.int8, device=device)
        return lambda: _gflops(lambda: torch._int_mm(a, b), 2 * n**3)
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    return lambda: _gflops(lambda: torch.mm(a, b), 2 * n**3)


# ResNet-style convolutions at batch 8 (channels, side, kernel): the layers the zoo's CNNs spend
# their time in; oneDNN's convolutions can beat its GEMM, and which shape is fastest varies by machine.
CONVS = ((64, 56, 3), (128, 28, 3), (256, 14, 3), (256, 56, 1))


def _conv(
    dtype: torch.dtype, device: str, channels_last: bool, c: int, hw: int, k: int
) -> Callable[[], float]:
    n = 8
    x = torch.randn(n, c, hw, hw, dtype=dtype, device=device)
    w = torch.randn(c, c, k, k, dtype=dtype, device=device)
    if channels_last:
        x, w = (
            x.contiguous(memory_format=torch.channels_last),
            w.contiguous(memory_format=torch.channels_last),
        )
    flops = 2 * n * c * c * k * k * hw * hw
    return lambda: _gflops(lambda: torch.nn.functional.conv2d(x, w, padding=k // 2), flops)


def _with_tf32(enabled: bool, run: Callable[[], float]) -> Callable[[], float]:
    """`run` with TF32 for CUDA matmuls and cuDNN convolutions set to `enabled` (cuDNN allows it by
    default), so the float32 ceiling is true fp32 and the tfloat32 one is TF32 throughout."""

    def measured() -> float:
        old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = enabled
        try:
            return run()
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old

    return measured


def _workloads(device: str) -> dict[str, dict[str, Callable[[], float]]]:
    """Compute dtype -> {workload name: a function measuring its GFLOP/s}."""
    sizes = GEMM_SIZES["cuda" if device == "cuda" else "cpu"]
    dtypes: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}
    if device == "cuda":
        dtypes["float16"] = torch.float16
    found: dict[str, dict[str, Callable[[], float]]] = {}
    for name, dtype in dtypes.items():
        runs = found.setdefault(name, {})
        for n in sizes:
            runs[f"gemm{n}"] = _gemm(n, dtype, device)
        for c, hw, k in CONVS:
            for layout in (False, True):
                runs[f"conv{k}x{k}_c{c}_{hw}{'_nhwc' if layout else ''}"] = _conv(
                    dtype, device, layout, c, hw, k
                )
    if device == "cuda":
        fp32 = found["float32"]
        found["tfloat32"] = {name: _with_tf32(True, run) for name, run in fp32.items()}
        found["float32"] = {name: _with_tf32(False, run) for name, run in fp32.items()}
    else:
        found["int8"] = {f"int_mm{n}": _gemm(n, torch.int8, device) for n in sizes}
    return found


def measure(device: str, passes: int = PASSES) -> dict[str, dict[str, float]]:
    """Compute dtype -> {workload: GFLOP/s} on `device` (tens of seconds, once per machine).

    Every workload runs `passes` times, interleaved with the others, and keeps its best: a machine
    that is busy for a moment lowers one pass, not the ceiling."""
    results: dict[str, dict[str, float]] = {}
    with torch.inference_mode():
        workloads = _workloads(device)
        for _ in range(passes):
            for dtype, runs in workloads.items():
                best = results.setdefault(dtype, {})
                for name, run in runs.items():
                    best[name] = max(best.get(name, 0.0), run())
    return results


class Ceilings:
    """Ceilings per device, measured on first use and cached on disk per machine, threads and torch."""

    def __init__(self, cache_root: Path | None = None) -> None:
        self.cache_root = cache_root
        self._found: dict[str, dict[str, dict[str, float]]] = {}

    def _path(self, device: str) -> Path:
        from optbench.catalog.checkpoints import cache_dir
        from optbench.catalog.machine import machine_info

        info = machine_info()
        # The version changes whenever the workloads do, so an older, weaker ceiling is not reused.
        name = f"v{VERSION}-{info['fingerprint']}-{device}-t{torch.get_num_threads()}-torch{torch.__version__}.json"
        return (self.cache_root or cache_dir()) / "ceilings" / name

    def workloads(self, device: str) -> dict[str, dict[str, float]]:
        if device not in self._found:
            path = self._path(device)
            try:
                self._found[device] = json.loads(path.read_text())["gflops_per_s"]
            except (OSError, ValueError, KeyError):
                found = measure(device)
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps({"device": device, "gflops_per_s": found}, indent=1))
                tmp.replace(path)
                self._found[device] = found
        return self._found[device]

    def peak(self, device: str, dtype: str) -> float | None:
        """The best GFLOP/s measured for `dtype` ('float32', 'bfloat16', ...) on `device`."""
        found = self.workloads(device).get(dtype)
        return max(found.values()) if found else None

    def columns(self, device: str, row_dtype: str, gflops_per_s: float | None) -> dict[str, Any]:
        """pct_of_peak, peak_gflops_per_s and peak_dtype for a row."""
        tf32 = tf32_enabled() if device == "cuda" else None
        dtype = compute_dtype(row_dtype, device, tf32)
        peak = self.peak(device, dtype)
        return {
            "peak_dtype": dtype,
            "peak_gflops_per_s": peak,
            "pct_of_peak": 100 * gflops_per_s / peak if peak and gflops_per_s else None,
        }
