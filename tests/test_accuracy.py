"""Accuracy and fidelity in the row: hand-checked metrics, and the status rules on a trained tiny model."""

import math

import pytest
import torch

from optbench.catalog.techniques import Technique, register_technique
from optbench.catalog.weights import WeightsProvider
from optbench.matrix.case import Case
from optbench.matrix.profiles import TimingPolicy
from optbench.measure.accuracy import accuracy_ok, baseline_is_deterministic, fidelity, topk_accuracy
from optbench.pytest_plugin.runner import CaseFailed, CaseRunner, RunState
from optbench.results import ResultsWriter

FAST = TimingPolicy(warmup_s=0.0, warmup_rounds=2, budget_s=0.05, min_rounds=6, max_rounds=50)


def test_fidelity_matches_hand_computed_values():
    ref = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]])
    out = torch.tensor([[1.0, 0.5], [1.0, 2.0], [4.0, 3.0]])
    f = fidelity(out, ref)
    assert f["agreement"] == pytest.approx(2 / 3)  # the last row's prediction flips
    assert f["max_abs_error"] == pytest.approx(1.0)
    assert f["mean_abs_error"] == pytest.approx((0 + 0.5 + 1 + 0 + 1 + 1) / 6)
    cos = [1 / math.sqrt(1.25), 4 / math.sqrt(5 * 4), 24 / 25]
    assert f["cosine_similarity"] == pytest.approx(sum(cos) / 3)


def test_topk_and_the_accuracy_floor():
    logits = torch.tensor([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5]])
    labels = torch.tensor([1, 1, 0])
    assert topk_accuracy(logits, labels, 1) == pytest.approx(1 / 3)
    assert topk_accuracy(logits, labels, 2) == pytest.approx(2 / 3)
    assert math.isnan(topk_accuracy(logits, labels, 5))
    assert accuracy_ok(0.99, 1.0, 0.99) and not accuracy_ok(0.98, 1.0, 0.99)
    a = torch.tensor([[1.0, 2.0]])
    assert baseline_is_deterministic(a, a + 1e-7) and not baseline_is_deterministic(
        a, torch.tensor([[2.0, 1.0]])
    )


@register_technique
class ProducesNaN(Technique):
    name = "test_nan"
    family = "precision"
    api = "test"

    def apply(self, prepared, ctx):
        model = prepared.module
        return prepared.then(self.api, forward=lambda x: model(x) * float("nan"))


@register_technique
class TooLossy(Technique):
    name = "test_noisy"
    family = "precision"
    api = "test"

    def apply(self, prepared, ctx):
        gen = torch.Generator().manual_seed(0)
        model = prepared.module

        def forward(x):
            out = model(x)
            return out + 50 * torch.randn(out.shape, generator=gen)

        return prepared.then(self.api, forward=forward)


@pytest.fixture
def state(tmp_path, registries):
    weights = WeightsProvider("trained", cache_root=tmp_path / "cache", image_task="digits")
    return RunState(run_id="t", writer=ResultsWriter(tmp_path / "run"), timing=FAST, weights=weights)


def test_rows_carry_accuracy_and_fidelity(state):
    runner = CaseRunner(state)
    base = runner.run(Case("tiny_mlp", "eager", "cpu", 4))
    assert base["top1"] >= 0.9 and base["top1_fp32"] == base["top1"] and base["top1_delta"] == 0
    assert (
        base["agreement"] == 1.0
        and base["max_abs_error"] == 0.0
        and base["cosine_similarity"] == pytest.approx(1)
    )
    assert base["eval_samples"] == 360 and base["eval_s"] > 0 and base["input_shape"] == "3x8x8"
    assert base["weights"] == "trained" and "digits-8px" in base["weights_source"]
    state.eval_limit = 50
    bf16 = runner.run(Case("tiny_mlp", "bf16_autocast", "cpu", 4))
    assert bf16["eval_samples"] == 50
    assert bf16["status"] == "passed"
    assert 0.99 <= bf16["agreement"] <= 1 and 0 < bf16["max_abs_error"] < 1
    # Compared on the 50 samples both saw, not against the eager top-1 over all 360.
    assert bf16["top1_ratio"] == pytest.approx(bf16["top1"] / bf16["top1_fp32"])


def test_nan_output_and_fail_accuracy_fail_the_case_unless_record_only(state):
    runner = CaseRunner(state)
    runner.run(Case("tiny_mlp", "eager", "cpu", 4))
    with pytest.raises(CaseFailed, match="NaN"):
        runner.run(Case("tiny_mlp", "test_nan", "cpu", 4))
    assert state.rows[-1]["status"] == "nan_output"
    with pytest.raises(CaseFailed, match=r"top-1 0\.\d+ is below 0.99 x fp32 top-1"):
        runner.run(Case("tiny_mlp", "test_noisy", "cpu", 4))
    lossy = state.rows[-1]
    assert lossy["status"] == "fail_accuracy" and lossy["top1"] < 0.5 and lossy["agreement"] < 0.5
    assert lossy["latency_ms_median"] > 0 and lossy["speedup"] > 0  # its speed is still reported
    state.record_only = True
    assert runner.run(Case("tiny_mlp", "test_noisy", "cpu", 4))["status"] == "fail_accuracy"


def test_nondeterministic_baseline_is_flagged(state, monkeypatch):
    import optbench.measure.inference as measure_module

    calls = iter(range(1000))
    real = measure_module.evaluate

    def flaky(prepared, x, batch_size, device):
        logits = real(prepared, x, batch_size, device)
        return logits if next(calls) % 2 == 0 else -logits

    monkeypatch.setattr(measure_module, "evaluate", flaky)
    with pytest.raises(CaseFailed, match="different outputs"):
        CaseRunner(state).run(Case("tiny_mlp", "eager", "cpu", 4))
    assert state.rows[-1]["status"] == "nondeterministic_baseline"


def test_the_paired_accuracy_interval_covers_at_its_stated_rate():
    """Synthetic predictions with a known change: the exact paired interval holds the true change in
    at least 95% of seeded draws (it conditions on the discordant count, so it is conservative)."""
    import numpy as np

    from optbench.results.stats import paired_difference_interval

    rng = np.random.default_rng(0)
    n, p_better, p_worse = 2000, 0.03, 0.04  # true change: -1 point
    misses = 0
    for _ in range(1000):
        draws = rng.random(n)
        better, worse = (
            int((draws < p_better).sum()),
            int(((draws >= p_better) & (draws < p_better + p_worse)).sum()),
        )
        low, high = paired_difference_interval(better, worse, n)
        misses += not (low <= p_better - p_worse <= high)
    assert misses / 1000 <= 0.05


def test_accuracy_verdicts_within_below_and_unclear_from_the_paired_interval():
    import torch

    from optbench.measure.floor import Reference, judge
    from optbench.results.schema import AccuracyVerdict

    WITHIN, BELOW, UNCLEAR = AccuracyVerdict.WITHIN, AccuracyVerdict.BELOW, AccuracyVerdict.UNCLEAR

    n = 2000
    labels = torch.arange(n) % 10
    right = torch.nn.functional.one_hot(labels, 10).float()
    wrong = torch.nn.functional.one_hot((labels + 1) % 10, 10).float()
    ref_logits = right.clone()
    ref_logits[:200] = wrong[:200]  # fp32: 90% right
    reference = Reference(ref_logits, True)

    def case(flip: int) -> dict:
        logits = ref_logits.clone()
        logits[200 : 200 + flip] = wrong[200 : 200 + flip]  # `flip` more samples wrong
        return judge(logits, labels, False, reference, 0.99)

    assert case(0)["accuracy_verdict"] == WITHIN and case(0)["top1_delta_ci95_low"] == 0.0
    below = case(100)  # 5 points down, floor -0.9 points
    assert below["accuracy_verdict"] == BELOW and below["status"] == "fail_accuracy"
    unclear = case(18)  # -0.9 points: on the floor's edge
    assert unclear["accuracy_verdict"] == UNCLEAR and "status" not in unclear
    assert "more held-out samples would decide it" in unclear["accuracy_note"]
    absolute = judge(case_logits := ref_logits.clone(), labels, False, reference, 0.99, floor_points=1.0)
    assert absolute["accuracy_floor_delta"] == -0.01 and case_logits is not None
    assert 0 <= below["agreement_ci95_low"] <= below["agreement"] <= below["agreement_ci95_high"] <= 1


def test_an_fp32_model_at_chance_gives_no_accuracy_evidence():
    """EfficientNet-B0 trained 4 epochs on hard digits reached 0.106 top-1: against a model that
    learned nothing, a damaging technique loses nothing, and "within floor" would be false."""
    import torch

    from optbench.measure.floor import Reference, judge
    from optbench.results.schema import AccuracyVerdict

    NO_EVIDENCE, WITHIN = AccuracyVerdict.NO_EVIDENCE, AccuracyVerdict.WITHIN

    n = 2000
    labels = torch.arange(n) % 10
    guesses = torch.nn.functional.one_hot(
        torch.randint(0, 10, (n,), generator=torch.Generator().manual_seed(0)), 10
    )
    ref_logits = guesses.float()  # about 10% right: chance for 10 classes
    damaged = ref_logits.roll(1, dims=0)  # disagrees with fp32 almost everywhere, still about 10% right
    chance = judge(damaged, labels, False, Reference(ref_logits, True), 0.99)
    assert chance["accuracy_verdict"] == NO_EVIDENCE and "status" not in chance
    assert "at chance (0.10 for 10 classes)" in chance["accuracy_note"]
    assert chance["agreement"] < 0.3 and chance["top1_fp32"] < 0.15  # the columns are still there
    # One that learned (here 40% right, well above chance) is judged as before.
    learned = ref_logits.clone()
    learned[: n * 3 // 10] = torch.nn.functional.one_hot(labels[: n * 3 // 10], 10).float()
    assert judge(learned.clone(), labels, False, Reference(learned, True), 0.99)["accuracy_verdict"] == WITHIN


def test_top1_reads_tied_logits_as_the_paired_interval_does():
    """bf16 rounds logits to ties; top-1 must take the same class argmax does, or top1_delta and the
    paired interval disagree (a +0.2-point change beside 100% agreement, seen on BERT bf16)."""
    from optbench.measure import accuracy

    logits = torch.tensor([[1.0, 1.0, 0.0], [0.0, 2.0, 2.0]])
    labels = torch.tensor([1, 2])  # each label is the second of two tied classes
    assert accuracy.topk_accuracy(logits, labels, 1) == float((logits.argmax(1) == labels).float().mean())
