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
    from torch.utils import benchmark

    fn()  # first call: kernel selection, allocation
    timer = benchmark.Timer("fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return flops / timer.blocked_autorange(min_run_time=MIN_RUN_S).median / 1e9


def _gemm(n: int, dtype: torch.dtype, device: str) -> float:
    if dtype == torch.int8:
        a = torch.randint(-100, 100, (n, n), dtype=torch.int8, device=device)
        b = torch.randint(-100, 100, (n, n), dtype=torch.int8, device=device)
        return _gflops(lambda: torch._int_mm(a, b), 2 * n**3)
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    return _gflops(lambda: torch.mm(a, b), 2 * n**3)


def _conv(dtype: torch.dtype, device: str, channels_last: bool) -> float:
    # A ResNet stage-2 3x3 convolution at batch 8: the kind of layer the zoo spends its time in.
    n, c, hw, k = 8, 128, 56, 3
    x = torch.randn(n, c, hw, hw, dtype=dtype, device=device)
    w = torch.randn(c, c, k, k, dtype=dtype, device=device)
    if channels_last:
        x, w = (
            x.contiguous(memory_format=torch.channels_last),
            w.contiguous(memory_format=torch.channels_last),
        )
    flops = 2 * n * c * c * k * k * hw * hw
    return _gflops(lambda: torch.nn.functional.conv2d(x, w, padding=1), flops)


def measure(device: str) -> dict[str, dict[str, float]]:
    """Compute dtype -> {workload: GFLOP/s} on `device` (a few seconds)."""
    results: dict[str, dict[str, float]] = {}
    sizes = GEMM_SIZES["cuda" if device == "cuda" else "cpu"]
    dtypes: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}
    if device == "cuda":
        dtypes["float16"] = torch.float16
    with torch.inference_mode():
        for name, dtype in dtypes.items():
            found = results.setdefault(name, {})
            for n in sizes:
                found[f"gemm{n}"] = _gemm(n, dtype, device)
            for layout in (False, True):
                found[f"conv3x3{'_nhwc' if layout else ''}"] = _conv(dtype, device, layout)
        if device == "cuda":
            old = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = True
            try:
                results["tfloat32"] = {f"gemm{n}": _gemm(n, torch.float32, device) for n in sizes}
            finally:
                torch.backends.cuda.matmul.allow_tf32 = old
        else:
            results["int8"] = {f"int_mm{n}": _gemm(n, torch.int8, device) for n in sizes}
    return results


class Ceilings:
    """Ceilings per device, measured on first use and cached on disk per machine, threads and torch."""

    def __init__(self, cache_root: Path | None = None) -> None:
        self.cache_root = cache_root
        self._found: dict[str, dict[str, dict[str, float]]] = {}

    def _path(self, device: str) -> Path:
        from optbench.checkpoints import cache_dir
        from optbench.environment import machine_info

        info = machine_info()
        name = f"{info['fingerprint']}-{device}-t{torch.get_num_threads()}-torch{torch.__version__}.json"
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
