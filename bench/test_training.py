"""Training steps (forward, loss, backward, optimizer step) of every model x training technique x
device case, each with a short seeded training that shows whether the technique still learns."""

import pytest


@pytest.mark.optbench(mode="training")
def test_training(optbench_case, optbench_run):
    optbench_run(optbench_case)
