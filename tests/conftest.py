"""Shared fixtures: a tiny model and a results folder, so unit tests run in milliseconds."""

from __future__ import annotations

import pytest
import torch
from torch import nn

pytest_plugins = ["pytester"]


def pytest_configure(config: pytest.Config) -> None:
    # The slowest tests in every log (CI's too), so the suite's time on 2 cores can be kept down.
    if config.option.durations is None:
        config.option.durations = 30


class TinyMLP(nn.Module):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(3 * 8 * 8, 32), nn.ReLU(), nn.Linear(32, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@pytest.fixture(scope="session")
def registries():
    """The zoo and built-in techniques, plus a tiny image model for fast tests."""
    from optbench.catalog.models import MODELS, TrainRecipe, image_classifier, load_zoo, register_model
    from optbench.catalog.techniques import TECHNIQUES, load_techniques

    load_techniques()
    load_zoo()
    if "tiny_mlp" not in MODELS:
        register_model(
            image_classifier(
                "tiny_mlp",
                TinyMLP,
                resolution=8,
                batch_sizes={"smoke": (2,)},
                recipe=TrainRecipe(target_top1=0.9, max_epochs=20, lr=3e-3, batch_size=32),
            )
        )
    return MODELS, TECHNIQUES
