"""A fixed reference workload, timed beside every case, so the gate can compare latency across
machines and across a run's drift: a case's latency divided by the reference measured next to it is
far steadier on a shared runner than the latency alone (the gate's `latency_vs_reference`)."""

from __future__ import annotations

import time

import torch

from optbench.catalog.devices import synchronize

SIZE = 384
CALLS = 21
"""Median of 21 calls of a 384x384 fp32 matmul: about 40 MFLOP each, a few ms in all on a CPU."""


def reference_ms(device: str) -> float:
    """Median ms of the reference matmul on `device`, with the case's threads."""
    dev = torch.device(device)
    generator = torch.Generator().manual_seed(0)
    a = torch.rand(SIZE, SIZE, generator=generator).to(dev)
    b = torch.rand(SIZE, SIZE, generator=generator).to(dev)
    with torch.inference_mode():
        torch.mm(a, b)  # warm-up: the first call pays for kernel selection
        synchronize(dev)
        samples = []
        for _ in range(CALLS):
            start = time.perf_counter()
            torch.mm(a, b)
            synchronize(dev)
            samples.append((time.perf_counter() - start) * 1e3)
    samples.sort()
    return samples[len(samples) // 2]
