"""Technique stacks: names, composition in order, conflicts and unsupported parts as skip reasons."""

import pytest
import torch

from optbench.catalog.models import MODELS
from optbench.catalog.techniques import (
    Prepared,
    TechniqueContext,
    check_techniques,
    default_techniques,
    resolve,
)
from optbench.errors import UsageProblem
from optbench.matrix.case import Case
from optbench.matrix.profiles import TimingPolicy
from optbench.pytest_plugin.runner import CaseRunner, RunState
from optbench.results import ResultsWriter

FAST = TimingPolicy(warmup_s=0.0, warmup_rounds=2, budget_s=0.05, min_rounds=6, max_rounds=50)


def test_a_stack_applies_its_parts_in_the_order_given(registries):
    stack = resolve("channels_last+bf16_autocast")
    assert stack.name == "channels_last+bf16_autocast" and stack.families == ("layout", "precision")
    spec = MODELS.get("resnet18").at_shape("task")
    model = spec.build(10).eval()
    x = torch.randn(2, 3, 32, 32)
    ctx = TechniqueContext(spec=spec, device=torch.device("cpu"), batch_size=2, input_shape=spec.input_shape)
    prepared = stack.apply(Prepared.eager(model, (x,)), ctx)
    assert prepared.api == "torch.channels_last + torch.autocast"
    assert prepared.dtype == "bfloat16 (autocast)"
    assert prepared.inputs[0].is_contiguous(memory_format=torch.channels_last)
    # Evaluation batches get the same input change as the timed inputs.
    assert prepared.adapt_inputs((x,))[0].is_contiguous(memory_format=torch.channels_last)
    assert next(prepared.module.parameters()).dtype == torch.float32
    with torch.inference_mode():
        out = prepared.forward(*prepared.inputs)
    assert out.dtype == torch.bfloat16 and out.shape == (2, 10)


def test_conflicting_and_unsupported_parts_become_skip_reasons(registries):
    cnn, lstm = MODELS.get("resnet18"), MODELS.get("lstm_classifier")
    reason = resolve("bf16_autocast+fp16_autocast").supports(cnn, "cuda", "inference")
    assert reason.startswith("bf16_autocast conflicts with fp16_autocast") and "precision" in reason
    reason = resolve("channels_last+bf16_autocast").supports(lstm, "cpu", "inference")
    assert reason.startswith("channels_last (part of channels_last+bf16_autocast): ")
    reason = resolve("channels_last+fp16_autocast").supports(cnn, "cpu", "inference")
    assert reason.startswith(
        "fp16_autocast (part of channels_last+fp16_autocast): fp16_autocast does not run on cpu"
    )
    assert resolve("channels_last+bf16_autocast+compile").supports(cnn, "cpu", "inference") is None


@pytest.mark.parametrize(
    "name, message",
    [
        ("channels_last+nope", "unknown technique 'nope'"),
        ("compile+compile", "repeats 'compile'"),
        ("compile+", "has an empty part"),
        ("eager+compile", "the baseline itself"),
    ],
)
def test_bad_stacks_are_usage_problems_naming_the_valid_techniques(registries, name, message):
    with pytest.raises(UsageProblem, match=message) as err:
        check_techniques(["eager", name])
    assert "valid techniques: " in str(err.value) and "bf16_autocast" in str(err.value)


def test_default_matrix_has_the_deployed_stacks_per_device(registries):
    cpu, cuda = default_techniques("cpu"), default_techniques("cuda")
    stacks = {d: [t for t in techs if "+" in t] for d, techs in (("cpu", cpu), ("cuda", cuda))}
    assert stacks["cpu"][:2] == ["channels_last+bf16_autocast", "channels_last+bf16_autocast+compile"]
    assert stacks["cuda"][:2] == ["channels_last+fp16_autocast", "channels_last+fp16_autocast+compile"]
    assert "channels_last+fp16_autocast" not in cpu
    # The edge recipes (prune, then quantize) run where their kernels do: the CPU.
    assert {"prune_channels_50+int8_static_fx", "prune_l1_70+int8_dynamic"} <= set(stacks["cpu"])
    assert "prune_l1_70+int8_dynamic" not in cuda and "torchao_int8_dynamic+compile" in cuda
    assert cpu.index("channels_last+bf16_autocast") > cpu.index("eager")  # single techniques first


def test_a_stack_is_one_row_with_a_speedup_interval(tmp_path, registries):
    state = RunState(run_id="t", writer=ResultsWriter(tmp_path), timing=FAST)
    row = CaseRunner(state).run(Case("tiny_mlp", "channels_last+bf16_autocast", "cpu", 2))
    assert row["status"] == "passed" and row["case_id"] == "tiny_mlp-channels_last+bf16_autocast-cpu-bs2"
    assert row["family"] == "layout+precision" and row["api"] == "torch.channels_last + torch.autocast"
    assert row["speedup_ci95_low"] <= row["speedup"] <= row["speedup_ci95_high"]
    assert [r["case_id"] for r in state.rows] == [
        "tiny_mlp-eager-cpu-bs2",
        "tiny_mlp-channels_last+bf16_autocast-cpu-bs2",
    ]
