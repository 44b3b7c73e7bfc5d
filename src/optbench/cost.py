"""What a prepared model costs besides time: parameters, bytes on disk, FLOPs."""

from __future__ import annotations

import contextlib
import hashlib
import io
import zlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count


def parameter_counts(module: nn.Module) -> tuple[int, int]:
    """(parameters, nonzero parameters); pruning shows up as the gap between them."""
    total = nonzero = 0
    for p in module.parameters():
        total += p.numel()
        nonzero += int(torch.count_nonzero(p.detach()))
    return total, nonzero


def serialized(module: nn.Module) -> bytes:
    """The bytes `torch.save(module.state_dict())` writes."""
    buffer = io.BytesIO()
    torch.save(module.state_dict(), buffer)
    return buffer.getvalue()


_COMPRESSED_SIZES: dict[str, int] = {}
"""Content digest -> compressed size: techniques that leave the weights alone share one compression
(about 1.6 s for resnet18's 47 MB). Only the sizes are kept, never the blobs."""


def model_sizes(module: nn.Module) -> tuple[int, int]:
    """(serialized bytes, zlib-compressed bytes). Compression shows what zeroed weights would save."""
    blob = serialized(module)
    digest = hashlib.blake2b(blob, digest_size=16).hexdigest()
    if digest not in _COMPRESSED_SIZES:
        _COMPRESSED_SIZES[digest] = len(zlib.compress(blob, 1))
    return len(blob), _COMPRESSED_SIZES[digest]


def _lstm_flops(
    input: torch.Size,
    hx: Any,
    params: Any,
    has_biases: bool,
    num_layers: int,
    dropout: float,
    train: bool,
    bidirectional: bool,
    batch_first: bool,
    *args: Any,
    out_shape: Any = None,
    **kwargs: Any,
) -> int:
    """aten.lstm has no formula in torch.utils.flop_counter: 4 gates, each an input and a hidden matmul.

    The counter hands formulas tensor shapes, not tensors."""
    batch, steps = (input[0], input[1]) if batch_first else (input[1], input[0])
    hidden = hx[0][-1]
    directions = 2 if bidirectional else 1
    flops = 0
    in_features = input[-1]
    for _ in range(num_layers):
        per_step = 2 * batch * 4 * hidden * (in_features + hidden)
        flops += directions * steps * per_step
        in_features = hidden * directions
    return flops


def _cpu_attention_flops(
    query: torch.Size, key: torch.Size, value: torch.Size, *args: Any, **kwargs: Any
) -> int:
    """scaled_dot_product_attention's CPU kernel has no formula in torch.utils.flop_counter: use the
    one it has for the CUDA kernels (Q @ K^T and attention @ V)."""
    return sdpa_flop_count(query, key, value)


# The counter decomposes any overload it has no formula for (and lstm's decomposition counts nothing),
# then looks formulas up by op packet: register both.
_CUSTOM = {
    torch.ops.aten.lstm.input: _lstm_flops,
    torch.ops.aten.lstm: _lstm_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention_flops,
}


@contextlib.contextmanager
def _regular_attention_path() -> Iterator[None]:
    """nn.TransformerEncoder's and nn.MultiheadAttention's fused inference fast path hides their
    matmuls from the counter (a BERT-base encoder counted about 0 FLOPs): count on the regular path,
    which does the same arithmetic."""
    mha = torch.backends.mha
    was = mha.get_fastpath_enabled()
    mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        mha.set_fastpath_enabled(was)


def count_flops(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> int:
    """FLOPs of one forward call (multiply-add = 2), counted by torch.utils.flop_counter."""
    counter = FlopCounterMode(display=False, custom_mapping=_CUSTOM)
    with _regular_attention_path(), counter, torch.inference_mode():
        model(*inputs)
    return int(counter.get_total_flops())
