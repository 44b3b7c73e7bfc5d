"""The built wheel, installed plainly into a fresh environment, runs a user's own repository.

.ci/run builds the wheel, installs it into a new virtual environment and points OPTBENCH_WHEEL_VENV
at it. Without that environment the test skips, saying so."""

import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from user_repo import user_repo

VENV = os.environ.get("OPTBENCH_WHEEL_VENV")

pytestmark = pytest.mark.skipif(
    not VENV, reason="needs OPTBENCH_WHEEL_VENV: a venv with the built wheel installed (.ci/run makes one)"
)


def test_the_installed_wheel_benchmarks_a_users_repository(tmp_path):
    python = Path(VENV) / "bin" / "python"
    where = subprocess.run(
        [python, "-c", "import optbench, optbench.catalog.tasks, optbench.zoo; print(optbench.__file__)"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    assert "site-packages" in where.stdout  # the wheel, not this checkout's sources
    user_repo(tmp_path)  # models/my_net.py and the README's benchmark test
    out = subprocess.run(
        [python, "-m", "pytest", "bench/", "--profile", "smoke", "--devices", "cpu", "--time-budget", "0.2",
         "--techniques", "eager,channels_last", "-p", "no:cacheprovider"],
        capture_output=True, text=True, cwd=tmp_path, timeout=900,
        env={**os.environ, "OPTBENCH_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    frame = pd.read_csv(tmp_path / "results" / "latest" / "results.csv")
    # Only the user's model: the zoo stays out of a user's default matrix.
    assert sorted(frame["case_id"]) == ["my_net-channels_last-cpu-bs2", "my_net-eager-cpu-bs2"]
    assert (frame["status"] == "passed").all() and (frame["weights"] == "trained").all()
    assert frame["trained_top1"].notna().all() and frame["below_target"].notna().all()
    assert "optbench: speedup vs eager fp32" in out.stdout
