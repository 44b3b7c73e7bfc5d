"""This machine's dense compute ceilings, measured once per machine fingerprint and cached.

A row's `pct_of_peak` is its achieved GFLOP/s over the ceiling for its compute dtype. The ceiling is
the best of several GEMM sizes and convolutions (oneDNN's convolutions can beat its GEMM), so a row
above 100% means the ceiling missed a faster kernel: measure more workloads, never clip the row.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

GEMM_SIZES = {"cpu": (1024, 2048, 3072), "cuda": (4096, 8192)}
MIN_RUN_S = 0.1
"""Each workload is timed in blocks for at least this long (torch.utils.benchmark's blocked_autorange)."""
PASSES = 2
BUDGET_S = 20.0
"""All of a device's ceilings are measured within about this long, whatever the CPU: a workload is
sized from a quick probe of its dtype's rate, and one that would not fit is left out (the issue's
bound is 30 s; a workload already started finishes)."""
MAX_CALL_S = 0.05
"""A workload whose one call would take longer than this at its dtype's probed rate is shrunk or left
out: an AVX2 CPU runs bf16 GEMMs at under 1 GFLOP/s, where a 3072^3 call would take a minute."""
VERSION = 3


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


@dataclass(frozen=True)
class Workload:
    """One ceiling workload: `flops` per call, and `build()` -> the call to time (built only when it
    is measured, so a left-out workload allocates nothing)."""

    flops: float
    build: Callable[[], Callable[[], object]]

    def run(self) -> float:
        return _gflops(self.build(), self.flops)


def _gemm(n: int, dtype: torch.dtype, device: str) -> Workload:
    def build() -> Callable[[], object]:
        if dtype == torch.int8:
            a = torch.randint(-100, 100, (n, n), dtype=torch.int8, device=device)
            b = torch.randint(-100, 100, (n, n), dtype=torch.int8, device=device)
            return lambda: torch._int_mm(a, b)
        a = torch.randn(n, n, dtype=dtype, device=device)
        b = torch.randn(n, n, dtype=dtype, device=device)
        return lambda: torch.mm(a, b)

    return Workload(2 * n**3, build)


# ResNet-style convolutions at batch 8 (channels, side, kernel): the layers the zoo's CNNs spend
# their time in; oneDNN's convolutions can beat its GEMM, and which shape is fastest varies by machine.
CONVS = ((64, 56, 3), (128, 28, 3), (256, 14, 3), (256, 56, 1))


def _conv(
    dtype: torch.dtype, device: str, channels_last: bool, c: int, hw: int, k: int, n: int = 8
) -> Workload:
    def build() -> Callable[[], object]:
        x = torch.randn(n, c, hw, hw, dtype=dtype, device=device)
        w = torch.randn(c, c, k, k, dtype=dtype, device=device)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
            w = w.contiguous(memory_format=torch.channels_last)
        return lambda: torch.nn.functional.conv2d(x, w, padding=k // 2)

    return Workload(2 * n * c * c * k * k * hw * hw, build)


def _quantized_linear(n: int) -> Workload:
    """int8 Linear through the active quantized engine (x86/fbgemm): the kernels of int8_dynamic and
    the FX int8 techniques, which can be far faster than `torch._int_mm` on a CPU without VNNI."""

    def build() -> Callable[[], object]:
        import torch.ao.nn.quantized as nnq

        layer = nnq.Linear(n, n)
        layer.set_weight_bias(
            torch.quantize_per_tensor(torch.randn(n, n), 0.05, 0, torch.qint8), torch.zeros(n)
        )
        x = torch.quantize_per_tensor(torch.randn(n, n), 0.05, 64, torch.quint8)
        return lambda: layer(x)

    return Workload(2 * n**3, build)


def _quantized_conv(c: int, hw: int, k: int, n: int = 8) -> Workload:
    def build() -> Callable[[], object]:
        import torch.ao.nn.quantized as nnq

        conv = nnq.Conv2d(c, c, k, padding=k // 2)
        weight = torch.quantize_per_tensor(torch.randn(c, c, k, k), 0.05, 0, torch.qint8)
        conv.set_weight_bias(weight, torch.zeros(c))
        x = torch.quantize_per_tensor(torch.randn(n, c, hw, hw), 0.05, 64, torch.quint8)
        x = x.contiguous(memory_format=torch.channels_last)
        return lambda: conv(x)

    return Workload(2 * n * c * c * k * k * hw * hw, build)


def _with_tf32(enabled: bool, work: Workload) -> Workload:
    """`work` with TF32 for CUDA matmuls and cuDNN convolutions set to `enabled` (cuDNN allows it by
    default), so the float32 ceiling is true fp32 and the tfloat32 one is TF32 throughout."""

    def build() -> Callable[[], object]:
        call = work.build()

        def measured() -> object:
            old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = enabled
            try:
                return call()
            finally:
                torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old

        return measured

    return Workload(work.flops, build)


def _probes(device: str) -> dict[str, Workload]:
    """Small workloads, one per compute dtype, whose rate sizes the others (a few ms each even where a
    dtype has no fast kernel)."""
    found = {"float32": _gemm(256, torch.float32, device), "bfloat16": _gemm(256, torch.bfloat16, device)}
    if device == "cuda":
        found["float16"] = _gemm(256, torch.float16, device)
        found["tfloat32"] = _with_tf32(True, found["float32"])
        found["float32"] = _with_tf32(False, found["float32"])
    else:
        found["int8"] = _quantized_linear(256)
    return found


def _workloads(device: str) -> dict[str, dict[str, Workload]]:
    """Compute dtype -> {workload name: workload}, largest last within each kind."""
    sizes = GEMM_SIZES["cuda" if device == "cuda" else "cpu"]
    dtypes: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}
    if device == "cuda":
        dtypes["float16"] = torch.float16
    found: dict[str, dict[str, Workload]] = {}
    for name, dtype in dtypes.items():
        runs = found.setdefault(name, {})
        for c, hw, k in CONVS:
            for layout in (False, True):
                runs[f"conv{k}x{k}_c{c}_{hw}{'_nhwc' if layout else ''}"] = _conv(
                    dtype, device, layout, c, hw, k
                )
        for n in sizes:
            runs[f"gemm{n}"] = _gemm(n, dtype, device)
    if device == "cuda":
        fp32 = found["float32"]
        found["tfloat32"] = {name: _with_tf32(True, w) for name, w in fp32.items()}
        found["float32"] = {name: _with_tf32(False, w) for name, w in fp32.items()}
    elif torch.backends.quantized.engine != "none":
        int8 = {f"qconv{k}x{k}_c{c}_{hw}": _quantized_conv(c, hw, k) for c, hw, k in CONVS}
        int8.update({f"qlinear{n}": _quantized_linear(n) for n in sizes})
        int8.update({f"int_mm{n}": _gemm(n, torch.int8, device) for n in sizes})
        found["int8"] = int8
    return found


def measure(
    device: str,
    passes: int = PASSES,
    budget_s: float = BUDGET_S,
    clock: Callable[[], float] = time.perf_counter,
    workloads: dict[str, dict[str, Workload]] | None = None,
    probes: dict[str, Workload] | None = None,
    show_progress: bool = True,
) -> dict[str, dict[str, float]]:
    """Compute dtype -> {workload: GFLOP/s} on `device`, within about `budget_s` on any CPU.

    A small probe per dtype gives its rate; a workload whose one call would take longer than
    MAX_CALL_S at that rate, or that would not fit in what is left of the budget, is left out (the
    probe itself always counts). Passes are interleaved and each workload keeps its best, so a
    machine busy for a moment lowers one pass, not the ceiling."""
    from optbench.progress import progress_bar

    started = clock()
    deadline = started + budget_s
    results: dict[str, dict[str, float]] = {}
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation, once per call
        probes = _probes(device) if probes is None else probes
        workloads = _workloads(device) if workloads is None else workloads
        total = passes * (len(probes) + sum(len(w) for w in workloads.values()))
        with progress_bar(total, f"optbench: this machine's {device} ceilings (<= {budget_s:.0f} s, once)",
                          enabled=show_progress, leave=False) as bar:  # fmt: skip
            rate: dict[str, float] = {}
            for _ in range(passes):
                # Probed again each pass, and raised by what the workloads reach: a probe slowed by
                # a busy moment must not leave a dtype's every workload out.
                for dtype, probe in probes.items():
                    best = results.setdefault(dtype, {})
                    best["probe"] = max(best.get("probe", 0.0), probe.run())
                    rate[dtype] = max(best.values())
                    bar.update()
                for dtype, runs in workloads.items():
                    best = results.setdefault(dtype, {})
                    for name, work in runs.items():
                        bar.update()
                        per_call = work.flops / (max(rate.get(dtype, 0.0), 1e-3) * 1e9)
                        # a measurement costs about two blocks of MIN_RUN_S plus its first call
                        if per_call > MAX_CALL_S or clock() + 2 * MIN_RUN_S + per_call > deadline:
                            continue
                        best[name] = max(best.get(name, 0.0), work.run())
                        rate[dtype] = max(rate.get(dtype, 0.0), best[name])
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
