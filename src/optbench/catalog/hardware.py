"""What hardware a technique needs to pay off, and whether this machine has it.

A technique names its need (`Technique.hardware`); a row on a machine without it still runs (users
want the number) and carries a one-line `hardware_note`. A failure on such a machine says the
hardware is missing, not only the library's message."""

from __future__ import annotations

from dataclasses import dataclass

from optbench.catalog.machine import UNKNOWN, cpu_capability, cpu_isa, cuda_capability


@dataclass(frozen=True)
class Need:
    words: str
    """The hardware, in words, for notes."""
    cpu_flags: tuple[str, ...] = ()
    """Any one of these /proc/cpuinfo flags serves on the CPU; empty: no CPU serves."""
    cuda_capability: tuple[int, int] | None = None
    """The least CUDA compute capability that serves; None: any CUDA device."""


NEEDS: dict[str, Need] = {
    "bf16": Need("native bf16 (AVX-512 BF16 or AMX-BF16 on a CPU; compute capability 8.0+ on CUDA)",
                 ("avx512_bf16", "amx_bf16"), (8, 0)),
    "int8": Need("int8 dot-product instructions (AVX-512 VNNI, AVX-VNNI or AMX-INT8)",
                 ("avx512_vnni", "avx_vnni", "amx_int8")),
    "fp16": Need("a CUDA GPU (fp16 has no fast CPU kernels)"),
    "2:4": Need("a CUDA GPU of compute capability 8.0 or higher (2:4 sparse tensor cores)", (), (8, 0)),
}  # fmt: skip


def missing(
    need: str | None,
    device: str,
    isa: str | None = None,
    capability: str | None = None,
    torch_capability: str | None = None,
) -> str | None:
    """Why this machine lacks what `need` pays off on, in one line, or None when it has it (or cannot
    tell: an unknown ISA never gets a note). `isa`, `capability` (CUDA) and `torch_capability` stand in
    for this machine's own, for tests and for judging another machine's rows."""
    if need is None or need not in NEEDS:
        return None
    wanted = NEEDS[need]
    if device == "cpu":
        isa = cpu_isa() if isa is None else isa
        if isa == UNKNOWN:
            return None
        if any(flag in isa.split() for flag in wanted.cpu_flags):
            return None
        have = cpu_capability() if torch_capability is None else torch_capability
        return f"{need} pays off with {wanted.words}; this CPU has none of them (torch: {have})"
    if device == "cuda":
        capability = cuda_capability() if capability is None else capability
        if not capability or capability == UNKNOWN or wanted.cuda_capability is None:
            return None
        major, minor = (int(x) for x in capability.split(".")[:2])
        if (major, minor) >= wanted.cuda_capability:
            return None
        return f"{need} pays off with {wanted.words}; this GPU is compute capability {capability}"
    return None


def notes(needs: tuple[str, ...], device: str) -> str | None:
    """The hardware notes of a technique (or a stack's techniques) on `device`, joined, or None."""
    found = [n for n in dict.fromkeys(missing(need, device) for need in needs) if n]
    return "; ".join(found) or None


def train_autocast(dtype: str | None) -> str | None:
    """The autocast dtype a training recipe asks for, or None (fp32) where this CPU lacks the native
    kernels for it: bf16 without AVX-512 BF16 or AMX trains 10 to 200 times slower than fp32."""
    if dtype == "bfloat16" and missing("bf16", "cpu") is not None:
        return None
    return dtype
