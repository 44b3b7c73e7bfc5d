import torch
from torch import nn

from optbench.cost import count_flops, model_sizes, parameter_counts, serialized


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
