"""CaseRunner on a tiny model: rows, speedup, references, failures. Timing budgets are tiny."""

import math
from dataclasses import replace

import pytest
import torch

from optbench.catalog.techniques import Technique, register_technique
from optbench.matrix.case import Case
from optbench.matrix.profiles import TimingPolicy
from optbench.pytest_plugin.runner import CaseFailed, CaseRunner, RunState
from optbench.results import ResultsWriter, load

FAST = TimingPolicy(warmup_s=0.0, warmup_rounds=2, budget_s=0.05, min_rounds=6, max_rounds=50)


@register_technique
class ExplodesInApply(Technique):
    name = "test_explodes"
    family = "precision"
    api = "test"

    def apply(self, prepared, ctx):
        raise RuntimeError("conversion failed on purpose")


@register_technique
class ExplodesOnCall(Technique):
    name = "test_explodes_on_call"
    family = "precision"
    api = "test"

    def apply(self, prepared, ctx):
        def forward(*args):
            raise ValueError("kernel missing")

        return prepared.then(self.api, forward=forward)


APPLIED: list[int] = []


@register_technique
class CountsPreparations(Technique):
    """A quantization-family technique that changes nothing and counts how often it is applied."""

    name = "test_counts_preparations"
    family = "quantization"
    api = "test"

    def apply(self, prepared, ctx):
        APPLIED.append(id(prepared.module))
        return prepared.then(self.api)


@pytest.fixture
def state(tmp_path, registries):
    return RunState(run_id="t", writer=ResultsWriter(tmp_path), timing=FAST)


def test_baseline_row_has_speedup_exactly_one_and_sane_values(state, tmp_path):
    row = CaseRunner(state).run(Case("tiny_mlp", "eager", "cpu", 2))
    assert row["status"] == "passed"
    assert row["speedup"] == 1.0
    assert row["baseline_case_id"] == "tiny_mlp-eager-cpu-bs2"
    assert 0 < row["latency_ms_min"] <= row["latency_ms_median"] <= row["latency_ms_p99"]
    assert row["rounds"] >= FAST.min_rounds and len(row["samples_ms"]) == row["rounds"]
    assert row["throughput"] == pytest.approx(2 / (row["latency_ms_median"] / 1e3))
    assert (
        row["params"] == 3 * 8 * 8 * 32 + 32 + 32 * 10 + 10 == row["nonzero_params"]
        or row["nonzero_params"] <= row["params"]
    )
    assert row["size_bytes"] > row["params"] * 4
    assert row["flops_per_sample"] == 2 * (192 * 32 + 32 * 10)
    assert row["gflops_per_s"] == pytest.approx(row["flops_per_sample"] * row["throughput"] / 1e9)
    assert row["prepare_s"] > 0 and row["first_call_ms"] > 0
    assert row["threads"] == torch.get_num_threads()
    assert row["peak_mem_mb"] is None or row["peak_mem_mb"] > 0
    assert load(tmp_path).loc[0, "speedup"] == 1.0


def test_speedup_is_the_median_of_ratios_paired_with_eager(state):
    runner = CaseRunner(state)
    base = runner.run(Case("tiny_mlp", "eager", "cpu", 2))
    other = runner.run(Case("tiny_mlp", "bf16_autocast", "cpu", 2))
    assert other["baseline_latency_ms"] == base["latency_ms_median"]
    assert other["speedup_method"] == "paired" and other["pairs"] >= 6 and other["stop_reason"]
    assert other["speedup_ci95_low"] <= other["speedup"] <= other["speedup_ci95_high"]
    assert other["dtype"] == "bfloat16 (autocast)"
    assert base["speedup_method"] == "baseline" and base.get("pairs") is None


def test_a_quantization_case_is_prepared_twice_and_timed_as_both(state):
    runner = CaseRunner(state)
    runner.run(Case("tiny_mlp", "eager", "cpu", 2))
    APPLIED.clear()
    row = runner.run(Case("tiny_mlp", "test_counts_preparations", "cpu", 2))
    assert row["status"] == "passed" and row["preparations"] == 2
    assert len(APPLIED) == 2 and APPLIED[0] != APPLIED[1]  # two models, built and prepared apart
    assert row["preparation_spread"] >= 1.0
    plain = runner.run(Case("tiny_mlp", "bf16_autocast", "cpu", 2))  # precision: one preparation
    assert plain["preparations"] == 1 and plain["preparation_spread"] is None


def test_a_profile_that_caps_preparations_prepares_the_case_once(state):
    state.timing = replace(state.timing, max_preparations=1)  # smoke's cap
    runner = CaseRunner(state)
    runner.run(Case("tiny_mlp", "eager", "cpu", 2))
    APPLIED.clear()
    row = runner.run(Case("tiny_mlp", "test_counts_preparations", "cpu", 2))
    assert row["status"] == "passed" and len(APPLIED) == 1
    assert row["preparations"] == 1 and row["preparation_spread"] is None


def test_without_pairing_speedup_is_baseline_median_over_case_median(state):
    state.paired = False
    runner = CaseRunner(state)
    base = runner.run(Case("tiny_mlp", "eager", "cpu", 2))
    other = runner.run(Case("tiny_mlp", "bf16_autocast", "cpu", 2))
    assert other["speedup_method"] == "bootstrap" and other.get("pairs") is None
    assert other["speedup"] == pytest.approx(base["latency_ms_median"] / other["latency_ms_median"])


def test_deselected_baseline_is_measured_as_a_reference_row(state):
    row = CaseRunner(state).run(Case("tiny_mlp", "channels_last", "cpu", 2))
    assert [r["case_id"] for r in state.rows] == ["tiny_mlp-eager-cpu-bs2", "tiny_mlp-channels_last-cpu-bs2"]
    assert state.rows[0]["selected"] is False and state.rows[1]["selected"] is True
    assert math.isfinite(row["speedup"]) and row["speedup"] > 0


def test_failing_technique_becomes_a_failed_row_and_the_run_goes_on(state, tmp_path):
    runner = CaseRunner(state)
    with pytest.raises(CaseFailed, match="RuntimeError: conversion failed on purpose"):
        runner.run(Case("tiny_mlp", "test_explodes", "cpu", 2))
    with pytest.raises(CaseFailed, match="ValueError: kernel missing"):
        runner.run(Case("tiny_mlp", "test_explodes_on_call", "cpu", 2))
    after = runner.run(Case("tiny_mlp", "bf16_autocast", "cpu", 2))
    assert after["status"] == "passed"
    frame = load(tmp_path)
    assert frame.set_index("case_id")["status"].to_dict() == {
        "tiny_mlp-eager-cpu-bs2": "passed",
        "tiny_mlp-test_explodes-cpu-bs2": "failed",
        "tiny_mlp-test_explodes_on_call-cpu-bs2": "failed",
        "tiny_mlp-bf16_autocast-cpu-bs2": "passed",
    }
    assert frame.set_index("case_id").loc["tiny_mlp-test_explodes-cpu-bs2", "reason"] == (
        "RuntimeError: conversion failed on purpose"
    )


def test_skipped_case_is_a_row_with_its_reason(state):
    row = CaseRunner(state).run(Case("tiny_mlp", "fp16_autocast", "cpu", 2, skip_reason="no fp16 here"))
    assert row["status"] == "skipped" and row["reason"] == "no fp16 here"
    assert state.rows == [row]


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (none here): CUDA timing path unverified"
)
def test_cuda_case_synchronizes_and_reports_cuda_memory(state):
    runner = CaseRunner(state)
    runner.run(Case("tiny_mlp", "eager", "cuda", 2))
    row = runner.run(Case("tiny_mlp", "fp16_autocast", "cuda", 2))
    assert row["status"] == "passed" and row["mem_source"] == "cuda_max_allocated"
    assert row["peak_mem_mb"] > 0 and row["speedup"] > 0


def test_a_failing_reference_is_measured_once_per_group(state):
    runner = CaseRunner(state)
    with pytest.raises(CaseFailed):
        runner.run(Case("tiny_mlp", "test_explodes", "cpu", 2))
    runner.run(Case("tiny_mlp", "bf16_autocast", "cpu", 2))
    assert [r["case_id"] for r in state.rows].count("tiny_mlp-eager-cpu-bs2") == 1
