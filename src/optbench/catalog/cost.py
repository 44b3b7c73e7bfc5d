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


def _plain(tensor: torch.Tensor) -> torch.Tensor:
    """The stored values of a weight: int_repr of a quantized tensor, the data of a tensor subclass
    (torchao's Int8Tensor keeps it as `qdata`, beside scales)."""
    if tensor.is_quantized:
        return tensor.int_repr()
    if type(tensor) not in (torch.Tensor, nn.Parameter) and hasattr(tensor, "__tensor_flatten__"):
        names, _ = tensor.__tensor_flatten__()
        inner = [getattr(tensor, n) for n in names]
        same = [t for t in inner if t.numel() == tensor.numel()]
        return _plain(same[0] if same else inner[0])
    if tensor.layout != torch.strided:  # sparse CSR/COO, semi-structured: count what is stored
        return tensor.to_dense() if tensor.layout in (torch.sparse_csr, torch.sparse_coo) else tensor
    return tensor


def _weights(module: nn.Module) -> Iterator[torch.Tensor]:
    """Every weight and bias the module computes with, whatever form a technique left it in:
    parameters, quantized modules' packed int8 weights (which are not parameters), int8 constants
    folded into an exported graph. BatchNorm statistics and quantization scales are not counted."""
    yield from module.parameters()
    for sub in module.modules():
        if isinstance(sub, torch.ao.nn.quantized.dynamic.LSTM):
            yield from sub.get_weight().values()
            yield from sub.get_bias().values()
        elif callable(getattr(sub, "weight", None)):
            # torch.ao quantized Linear/Conv (static and dynamic): weight() unpacks the int8 weight
            with contextlib.suppress(Exception):
                yield sub.weight()
                bias = sub.bias() if callable(getattr(sub, "bias", None)) else None
                if bias is not None:
                    yield bias
    params = {id(p) for p in module.parameters()}
    for _, buffer in module.named_buffers():
        # Exported graphs keep folded int8 weights as buffers; other int8 buffers are zero points.
        if id(buffer) not in params and buffer.dtype == torch.int8 and buffer.dim() > 1:
            yield buffer


def parameter_counts(module: nn.Module) -> tuple[int, int]:
    """(parameters, nonzero parameters); pruning shows up as the gap between them. Counts weights
    in every stored form (see _weights), so an int8 model has as many parameters as its fp32 one."""
    total = nonzero = 0
    for weight in _weights(module):
        values = _plain(weight.detach())
        total += values.numel()
        nonzero += int(torch.count_nonzero(values))
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


def count_training_flops(
    model: nn.Module, inputs: tuple[torch.Tensor, ...], targets: torch.Tensor
) -> tuple[int, str]:
    """FLOPs of one training step's forward, loss and backward (the optimizer's update is not
    counted), and how they were found. Backward formulas the counter lacks (the LSTM's fused
    kernels) would leave the backward uncounted: then the usual estimate, 3x the forward, stands."""
    forward = count_flops(model, inputs)
    counter = FlopCounterMode(display=False, custom_mapping=_CUSTOM)
    model.train()
    with _regular_attention_path(), counter:
        loss = nn.functional.cross_entropy(model(*inputs).float(), targets)
        loss.backward()
    model.zero_grad(set_to_none=True)
    counted = int(counter.get_total_flops())
    if counted < 2 * forward:  # backward costs about twice the forward: it was not all counted
        return 3 * forward, "3x forward (backward not fully counted)"
    return counted, "forward+backward counted"
