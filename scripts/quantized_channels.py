"""How a quantized depthwise convolution's speed depends on its channel count, on this machine's active
quantized engine. Why `prune_channels_*` keeps a multiple of 8 channels (ROUND_TO in
optbench.catalog.techniques.prune_structured). Prints figures; asserts nothing.

Each convolution is one depthwise Conv2d (groups = channels), quantized by FX with the engine's
default qconfig and calibrated on its input; the median of --calls calls at batch 8 is printed,
beside the fp32 convolution's, for counts that are and are not multiples of 8:

    python scripts/quantized_channels.py [--channels 470,472,806,808] [--size 14] [--calls 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
from torch import nn
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx


def median_ms(module: nn.Module, x: torch.Tensor, calls: int) -> float:
    times = []
    with torch.inference_mode():
        for _ in range(3):
            module(x)
        for _ in range(calls):
            started = time.perf_counter()
            module(x)
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def depthwise(channels: int, kernel: int, size: int, calls: int) -> tuple[float, float]:
    """(fp32 ms, int8 ms) of one depthwise convolution at batch 8."""
    conv = nn.Sequential(nn.Conv2d(channels, channels, kernel, padding=kernel // 2, groups=channels)).eval()
    x = torch.randn(8, channels, size, size, generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():  # FX quantization's deprecation warnings
        warnings.simplefilter("ignore")
        observed = prepare_fx(conv, get_default_qconfig_mapping(torch.backends.quantized.engine), (x,))
        observed(x)
        quantized = convert_fx(observed)
        return median_ms(conv, x, calls), median_ms(quantized, x, calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", default="470,472,476,480,806,808,100,104")
    parser.add_argument("--kernels", default="3,5")
    parser.add_argument("--size", type=int, default=14, help="height and width of the input")
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    print(
        f"torch {torch.__version__}, capability {torch.backends.cpu.get_cpu_capability()}, "
        f"quantized engine {torch.backends.quantized.engine}, {torch.get_num_threads()} threads"
    )
    print("| channels | multiple of 8 | kernel | fp32 ms | int8 ms | int8 / fp32 |")
    print("|---|---|---|---|---|---|")
    for channels in (int(c) for c in args.channels.split(",")):
        for kernel in (int(k) for k in args.kernels.split(",")):
            fp32, int8 = depthwise(channels, kernel, args.size, args.calls)
            print(
                f"| {channels} | {'yes' if channels % 8 == 0 else 'no'} | {kernel}x{kernel} "
                f"| {fp32:.2f} | {int8:.2f} | {int8 / fp32:.2f} |"
            )


if __name__ == "__main__":
    main()
