"""The input pipeline: an on-disk JPEG ImageFolder through a DataLoader, one case per setting (workers,
pinned memory, persistent workers, prefetching, decoder, augmentation, shuffling) and batch size,
timed alone and feeding a training step of the model."""

import pytest

# The sweep reads images for one consumer model by default; --models and --batch-sizes override.
SWEEP = {"smoke": (8,), "default": (32,), "full": (32, 64, 128)}


@pytest.mark.optbench(mode="data", models=("resnet18",), batch_sizes=SWEEP)
def test_data_pipeline(optbench_case, optbench_run):
    optbench_run(optbench_case)
