"""Training mode: the step, gradient accumulation, loss scaling, checkpointing, convergence and the
rows CaseRunner writes for training cases (tiny models, tiny timing budgets)."""

import copy
import dataclasses
import math

import pytest
import torch
from torch import nn

from optbench.catalog.tasks.base import short_training_task
from optbench.catalog.tasks.digits import digits_task
from optbench.catalog.techniques import Prepared, TechniqueContext, resolve
from optbench.catalog.techniques.activation_checkpoint import repeated_blocks
from optbench.catalog.techniques.base import NotApplicable
from optbench.catalog.weights import WeightsProvider
from optbench.matrix.case import Case
from optbench.matrix.profiles import TimingPolicy
from optbench.measure.convergence import DIVERGED, short_training, verdict
from optbench.measure.train_step import backward_micro_batches, train_step
from optbench.pytest_plugin.runner import CaseRunner, RunState
from optbench.results import ResultsWriter

FAST = TimingPolicy(warmup_s=0.0, warmup_rounds=2, budget_s=0.05, min_rounds=6, max_rounds=50)


def tiny_encoder() -> nn.Module:
    """LayerNorm, attention and Linear layers: no BatchNorm, whose batch statistics would make
    micro-batches differ from the whole batch by design."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True, dropout=0.0)
    return nn.Sequential(nn.TransformerEncoder(layer, 2), nn.Flatten(), nn.Linear(16 * 6, 5))


def ctx(spec, batch_size=8, mode="training") -> TechniqueContext:
    return TechniqueContext(
        spec=spec, device=torch.device("cpu"), batch_size=batch_size, input_shape="", mode=mode
    )


@pytest.mark.parametrize("k", [2, 4, 8])
def test_accumulated_gradients_equal_one_large_batch(k, registries):
    x = torch.randn(8, 6, 16, generator=torch.Generator().manual_seed(1))
    y = torch.randint(5, (8,), generator=torch.Generator().manual_seed(2))
    whole, parts = tiny_encoder(), tiny_encoder()
    parts.load_state_dict(whole.state_dict())
    loss_whole = backward_micro_batches(Prepared.eager(whole, (x,)), (x,), y)
    accumulated = resolve(f"grad_accum_{k}").apply(
        Prepared.eager(parts, (x,)), ctx(registries[0].get("tiny_mlp"))
    )
    assert accumulated.micro_batches == k and accumulated.columns["micro_batch_size"] == 8 // k
    loss_parts = backward_micro_batches(accumulated, (x,), y)
    assert float(loss_parts) == pytest.approx(float(loss_whole), rel=1e-5)
    for (name, a), b in zip(whole.named_parameters(), parts.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-6), name


def test_accumulation_that_does_not_divide_the_batch_is_not_applicable(registries):
    with pytest.raises(NotApplicable, match="batch 6 does not split into 4"):
        resolve("grad_accum_4").apply(
            Prepared.eager(nn.Linear(2, 2), ()), ctx(registries[0].get("tiny_mlp"), 6)
        )


def test_fp16_training_scales_the_loss_with_grad_scaler(registries):
    spec = registries[0].get("tiny_mlp")
    prepared = resolve("fp16_autocast").apply(Prepared.eager(nn.Linear(2, 2), ()), ctx(spec))
    assert prepared.grad_scaler and "GradScaler" in prepared.api
    inference = resolve("fp16_autocast").apply(
        Prepared.eager(nn.Linear(2, 2), ()), ctx(spec, mode="inference")
    )
    assert not inference.grad_scaler


def _scaled_step(device: torch.device) -> tuple[float, torch.amp.GradScaler]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 5)).to(device)
    before = [p.detach().clone() for p in model.parameters()]

    def forward(x):
        with torch.autocast(device.type, dtype=torch.float16):
            return model(x)

    prepared = Prepared(forward=forward, inputs=(), module=model, grad_scaler=True)
    step = train_step(prepared, device, lr=1e-2)
    loss = step((torch.randn(16, 32, device=device),), torch.randint(5, (16,), device=device))
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    return float(loss), step.scaler


def test_grad_scaler_step_on_cpu_updates_the_weights():
    loss, scaler = _scaled_step(torch.device("cpu"))
    assert math.isfinite(loss) and scaler is not None and scaler.get_scale() > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fp16 AMP with GradScaler needs a CUDA GPU")
def test_grad_scaler_step_on_cuda_updates_the_weights():
    loss, scaler = _scaled_step(torch.device("cuda"))
    assert math.isfinite(loss) and scaler.get_scale() > 0


def test_checkpointing_keeps_gradients_and_finds_the_blocks(registries):
    import torchvision

    assert len(repeated_blocks(torchvision.models.resnet18())) == 8
    x = torch.randn(4, 6, 16)
    y = torch.randint(5, (4,))
    plain, checked = tiny_encoder(), tiny_encoder()
    prepared = resolve("activation_checkpoint").apply(
        Prepared.eager(checked, (x,)), ctx(registries[0].get("tiny_mlp"))
    )
    assert prepared.columns["checkpointed_blocks"] == 2
    backward_micro_batches(Prepared.eager(plain, (x,)), (x,), y)
    backward_micro_batches(prepared, (x,), y)
    for a, b in zip(plain.parameters(), checked.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-6)
    lstm = registries[0].get("lstm_classifier")
    assert "no repeated blocks" in resolve("activation_checkpoint").supports(lstm, "cpu", "training")


def _digits_like(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.randint(4, (n,), generator=gen)
    x = torch.randn(n, 8, generator=gen) * 0.3 + nn.functional.one_hot(y, 8).float() * 2
    return x, y


def test_short_training_learns_and_a_diverged_one_is_flagged():
    gen = torch.Generator().manual_seed(0)
    train, held_out = _digits_like(256, gen), _digits_like(64, gen)
    result = short_training(
        lambda model, inputs: Prepared.eager(model, inputs),
        lambda: nn.Linear(8, 4),
        train,
        held_out,
        steps=40,
        batch_size=32,
        lr=0.05,
        device=torch.device("cpu"),
    )
    assert result.steps == 40 and math.isfinite(result.final_loss) and result.top1 > 0.9
    columns = result.columns()
    assert columns["converge_top1"] == result.top1 and columns["converge_steps"] == 40
    blown = short_training(
        lambda model, inputs: Prepared.eager(model, inputs),
        lambda: nn.Linear(8, 4),
        train,
        held_out,
        steps=40,
        batch_size=32,
        lr=1e30,
        device=torch.device("cpu"),
    )
    assert not math.isfinite(blown.final_loss) and blown.top1 is None and blown.steps < 40
    fp32 = {"converge_loss": result.final_loss, "converge_top1": result.top1, "converge_steps": 40}
    assert verdict({"converge_loss": blown.final_loss, "converge_top1": None}, fp32, 4)["status"] == DIVERGED
    chance = verdict({"converge_loss": 1.38, "converge_top1": 0.25, "converge_steps": 40}, fp32, 4)
    assert chance["status"] == DIVERGED and "at chance" in chance["reason"]
    fine = verdict({"converge_loss": 0.2, "converge_top1": 0.9, "converge_steps": 40}, fp32, 4)
    assert "status" not in fine and fine["converge_top1_delta"] == pytest.approx(0.9 - result.top1)


def test_a_short_training_where_fp32_itself_stays_at_chance_is_no_evidence_not_diverged():
    # resnet50 from scratch learns nothing in 50 steps: that says nothing about any technique.
    fp32 = {"converge_loss": 2.3, "converge_top1": 0.122, "converge_steps": 50}
    for row in (fp32, {"converge_loss": 2.3, "converge_top1": 0.132, "converge_steps": 50}):
        columns = verdict(row, fp32, 10)
        assert "status" not in columns
        assert columns["accuracy_verdict"] == "no evidence"
        assert "at chance" in columns["accuracy_note"] and "--converge-steps" in columns["accuracy_note"]
    blown = verdict({"converge_loss": float("nan"), "converge_top1": None}, fp32, 10)
    assert blown["status"] == DIVERGED  # a non-finite loss is still divergence


@pytest.fixture
def state(tmp_path, registries):
    weights = WeightsProvider("trained", cache_root=tmp_path / "cache", progress=False, image_task="digits")
    return RunState(
        run_id="t",
        writer=ResultsWriter(tmp_path / "run"),
        timing=FAST,
        weights=weights,
        converge_steps=60,
    )


def test_training_rows_carry_speed_memory_flops_and_convergence(state):
    runner = CaseRunner(state)
    trained = copy.deepcopy(state.weights.get(registries_spec()).state_dict)
    rows = {
        t: runner.run(Case("tiny_mlp", t, "cpu", 8, "training"))
        for t in ("eager", "bf16_autocast", "grad_accum_4")
    }
    base = rows["eager"]
    for row in rows.values():
        assert row["status"] == "passed", row.get("reason")
        assert row["mode"] == "training" and row["case_id"].endswith("-training")
        assert row["latency_ms_median"] > 0 and row["throughput"] == pytest.approx(
            8 / (row["latency_ms_median"] / 1e3)
        )
        assert row["speedup"] > 0 and row["baseline_case_id"] == "tiny_mlp-eager-cpu-bs8-training"
        # forward + backward: weight gradients cost one forward, input gradients one more except
        # at the first layer (its input needs none): 2x the forward plus the second layer's share.
        forward = 2 * (192 * 32 + 32 * 10)
        assert row["flops_per_sample"] == 2 * forward + 2 * 32 * 10
        assert row["peak_mem_mb"] > 0 and row["mem_source"] == "cpu_rss_peak"
        assert row["converge_steps"] == 60 and math.isfinite(row["converge_loss"])
        assert 0.5 < row["converge_top1"] <= 1 and row["converge_top1_fp32"] == base["converge_top1"]
    assert base["speedup"] == 1.0 and base["converge_top1_delta"] == 0
    assert (
        rows["grad_accum_4"]["technique_notes"]
        and "micro_batch_size" in rows["grad_accum_4"]["technique_notes"]
    )
    # Training worked on a copy: the cached checkpoint's weights are unchanged.
    after = state.weights.get(registries_spec()).state_dict
    assert all(torch.equal(trained[k], after[k]) for k in trained)


def registries_spec():
    from optbench.catalog.models import MODELS

    return MODELS.get("tiny_mlp")


def test_the_short_training_learns_the_plain_digits_where_the_image_task_is_hard_digits(tmp_path, registries):
    """50 steps from scratch leave resnet50, MobileNetV3, EfficientNet-B0 and ViT at chance on hard
    digits (run train-1): the short training learns the plain digits at the same shape instead, the
    row names that task, and the user's own data is kept."""
    weights = WeightsProvider(
        "trained", cache_root=tmp_path / "cache", progress=False, image_task="hard_digits"
    )
    got = weights.get(registries_spec())
    assert got.task.name.startswith("hard-digits-8px") and got.converge_task.name == "digits-8px-seed0"
    state = RunState(
        run_id="t", writer=ResultsWriter(tmp_path / "run"), timing=FAST, weights=weights, converge_steps=30
    )
    row = CaseRunner(state).run(Case("tiny_mlp", "eager", "cpu", 8, "training"))
    assert row["status"] == "passed", row.get("reason")
    assert row["converge_task"] == "digits-8px-seed0" and row["converge_top1"] > 0.5
    assert row["accuracy_source"] == "the embedded task (digits-8px-seed0), short training from scratch"
    yours = dataclasses.replace(got.task, origin="/data/mine")
    assert short_training_task(got.eval_spec, yours, "hard_digits") is yours
    plain = digits_task(8)
    assert short_training_task(got.eval_spec, plain, "digits") is plain


def test_training_case_that_does_not_divide_is_a_skipped_row(state):
    row = CaseRunner(state).run(Case("tiny_mlp", "grad_accum_4", "cpu", 6, "training"))
    assert row["status"] == "skipped" and "does not split into 4" in row["reason"]
