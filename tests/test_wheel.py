"""The built wheel, installed plainly into a fresh environment, runs a user's own repository.

.ci/run builds the wheel, installs it into a new virtual environment and points OPTBENCH_WHEEL_VENV
at it. Without that environment the test skips, saying so."""

import os
import subprocess
import textwrap
from pathlib import Path

import pandas as pd
import pytest

VENV = os.environ.get("OPTBENCH_WHEEL_VENV")

pytestmark = pytest.mark.skipif(
    not VENV, reason="needs OPTBENCH_WHEEL_VENV: a venv with the built wheel installed (.ci/run makes one)"
)

MODEL = """
from torch import nn
from optbench import image_classifier, register_model

register_model(image_classifier(
    "wheel_net",
    lambda num_classes: nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                      nn.Linear(4, num_classes)),
    resolution=16,
))
"""

BENCH = """
import pytest

@pytest.mark.optbench(mode="inference")
def test_inference(optbench_case, optbench_run):
    optbench_run(optbench_case)
"""


def test_the_installed_wheel_benchmarks_a_users_repository(tmp_path):
    python = Path(VENV) / "bin" / "python"
    where = subprocess.run(
        [python, "-c", "import optbench, optbench.tasks, optbench.zoo; print(optbench.__file__)"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    assert "site-packages" in where.stdout  # the wheel, not this checkout's sources
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "wheel_net.py").write_text(textwrap.dedent(MODEL))
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "test_inference.py").write_text(textwrap.dedent(BENCH))
    out = subprocess.run(
        [python, "-m", "pytest", "bench/", "--profile", "smoke", "--devices", "cpu", "--time-budget", "0.2",
         "--techniques", "eager,channels_last", "-p", "no:cacheprovider"],
        capture_output=True, text=True, cwd=tmp_path, timeout=900,
        env={**os.environ, "OPTBENCH_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    frame = pd.read_csv(tmp_path / "results" / "latest" / "results.csv")
    # Only the user's model: the zoo stays out of a user's default matrix.
    assert sorted(frame["case_id"]) == ["wheel_net-channels_last-cpu-bs2", "wheel_net-eager-cpu-bs2"]
    assert (frame["status"] == "passed").all() and (frame["weights"] == "trained").all()
    assert frame["trained_top1"].notna().all() and frame["below_target"].notna().all()
    assert "optbench: speedup vs eager fp32" in out.stdout
