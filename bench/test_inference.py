"""Inference latency of every model x technique x device case (the matrix comes from the optbench plugin)."""

import pytest


@pytest.mark.optbench(mode="inference")
def test_inference(optbench_case, optbench_run):
    optbench_run(optbench_case)
