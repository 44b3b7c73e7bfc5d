from pathlib import Path

import torch
from torch import nn

from optbench.catalog.cost import count_flops, model_sizes, parameter_counts, serialized
from optbench.catalog.models import zoo_dir


def test_flops_of_a_linear_layer_and_an_lstm():
    linear = nn.Linear(16, 8)
    assert count_flops(linear, (torch.randn(4, 16),)) == 2 * 4 * 16 * 8

    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(12, 20, num_layers=2, batch_first=True)

        def forward(self, x):
            return self.lstm(x)[0]

    batch, steps = 3, 7
    # per layer and step: 4 gates x (input matmul + hidden matmul), 2 FLOPs per multiply-add
    expected = steps * 2 * batch * 4 * 20 * (12 + 20) + steps * 2 * batch * 4 * 20 * (20 + 20)
    assert count_flops(Wrap(), (torch.randn(batch, steps, 12),)) == expected


def test_parameter_counts_see_zeroed_weights():
    layer = nn.Linear(10, 10)
    with torch.no_grad():
        layer.weight[:5] = 0
    total, nonzero = parameter_counts(layer)
    assert total == 110
    assert nonzero == 110 - 50 - int((layer.bias == 0).sum())


def test_sizes_are_the_saved_bytes_and_compression_sees_zeros():
    dense = nn.Linear(256, 256)
    size, compressed = model_sizes(dense)
    assert size == len(serialized(dense))
    assert size > 256 * 256 * 4
    with torch.no_grad():
        dense.weight.zero_()
    size_zero, compressed_zero = model_sizes(dense)
    assert size_zero == size
    assert compressed_zero < compressed / 10


def _analytic_flops(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> int:
    """2 x multiply-accumulates of every convolution, Linear layer, attention block and LSTM, counted
    from the shapes each module sees (forward hooks), independently of torch.utils.flop_counter."""
    total = 0

    def hook(module, args, out):
        nonlocal total
        if isinstance(module, nn.Conv2d):
            k = module.kernel_size[0] * module.kernel_size[1]
            total += 2 * out.numel() * (module.in_channels // module.groups) * k
        elif isinstance(module, nn.Linear):
            total += 2 * out.numel() * module.in_features
        elif isinstance(module, nn.MultiheadAttention):
            q = args[0]  # batch_first in both zoo models: (batch, tokens, embed)
            batch, tokens, embed = q.shape
            projections = 2 * batch * tokens * embed * (3 * embed + embed)  # q, k, v in; out
            attention = 2 * 2 * batch * tokens * tokens * embed  # Q @ K^T and A @ V
            total += projections + attention
        elif isinstance(module, nn.LSTM):
            x = args[0]
            batch, steps = x.shape[:2]
            h, size = module.hidden_size, module.input_size
            for _ in range(module.num_layers):
                total += 2 * batch * steps * 4 * h * (size + h)
                size = h

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    # The fused fast path skips submodule calls (and so the hooks); the regular path runs them.
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.inference_mode():
            model(*inputs)
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
        for handle in handles:
            handle.remove()
    return total


def test_every_zoo_model_counts_its_analytic_flops_within_10_percent(registries):
    models, _ = registries
    zoo = [name for name in models.names() if Path(models.origin(name)).resolve().parent == zoo_dir()]
    assert {"resnet18", "resnet50", "vit_b_16", "bert_base_encoder", "lstm_classifier"} <= set(zoo)
    for name in zoo:
        spec = models.get(name)  # the deployment shape: 3x224x224, 128 / 64 tokens
        torch.manual_seed(0)
        model = spec.build(10).eval()
        inputs = spec.example_inputs(1, torch.Generator().manual_seed(0))
        counted, analytic = count_flops(model, inputs), _analytic_flops(model, inputs)
        assert analytic > 0
        assert abs(counted - analytic) <= 0.10 * analytic, (name, counted, analytic)
