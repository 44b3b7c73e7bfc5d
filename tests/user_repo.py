"""A throwaway user repository: one model file and the README's thin benchmark test. Shared by the
end-to-end tests (editable install) and the wheel test (plain install)."""

from __future__ import annotations

import textwrap
from pathlib import Path

USER_MODEL = """
from torch import nn
from optbench import image_classifier, register_model

register_model(image_classifier(
    "my_net",
    lambda num_classes: nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                      nn.Linear(8, num_classes)),
    resolution=16,
))
"""

USER_BENCH = """
import pytest

@pytest.mark.optbench(mode="inference")
def test_inference(optbench_case, optbench_run):
    optbench_run(optbench_case)
"""


def user_repo(tmp_path: Path, pyproject: str = "") -> Path:
    """models/my_net.py and bench/test_inference.py in `tmp_path` (and a pyproject.toml)."""
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "my_net.py").write_text(textwrap.dedent(USER_MODEL))
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "test_inference.py").write_text(textwrap.dedent(USER_BENCH))
    if pyproject:
        (tmp_path / "pyproject.toml").write_text(textwrap.dedent(pyproject))
    return tmp_path
