"""The technique context: train split, autograd outside inference mode, and cached preparation
(the README's worked example, run as written)."""

import re
from pathlib import Path

import pytest
import torch

from optbench.catalog.models import MODELS
from optbench.catalog.techniques import TECHNIQUES, Technique, TechniqueContext, register_technique
from optbench.catalog.weights import WeightsProvider
from optbench.errors import UsageProblem
from optbench.matrix.case import Case
from optbench.matrix.profiles import TimingPolicy
from optbench.pytest_plugin.runner import CaseRunner, RunState
from optbench.results import ResultsWriter

FAST = TimingPolicy(warmup_s=0.0, warmup_rounds=2, budget_s=0.05, min_rounds=6, max_rounds=50)
README = Path(__file__).resolve().parents[1] / "README.md"
SEEN: dict[str, object] = {}


def readme_example() -> str:
    """The README's worked example of a calibrating technique, as a user would copy it."""
    block = re.search(r"```python\n(# techniques/act_fake_int8\.py\n.*?)```", README.read_text(), re.S)
    assert block, "README lost its worked example"
    return block.group(1)


@register_technique
class FineTunesOneStep(Technique):
    """Uses autograd inside apply: proves apply runs outside inference mode."""

    name = "test_fine_tune_step"
    family = "training"
    api = "test"

    def apply(self, prepared, ctx):
        SEEN["inference_mode"] = torch.is_inference_mode_enabled()
        model = prepared.module
        x, y = next(ctx.train_batches(samples=8))
        model.train()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        SEEN["grad"] = next(model.parameters()).grad is not None
        SEEN["shapes"] = (tuple(x.shape), ctx.input_shape, ctx.batch_size, ctx.spec.name, ctx.seed)
        model.zero_grad(set_to_none=True)
        model.eval()
        return prepared


@pytest.fixture(scope="session")
def example(registries, tmp_path_factory):
    """The README's example, saved as the user would save it and loaded as the plugin loads it."""
    from optbench.catalog.models import load_user_dir

    folder = tmp_path_factory.mktemp("techniques")
    (folder / "act_fake_int8.py").write_text(readme_example())
    load_user_dir(folder)
    return TECHNIQUES.get("act_fake_int8")


@pytest.fixture
def state(tmp_path, registries):
    weights = WeightsProvider("trained", cache_root=tmp_path / "cache", progress=False, image_task="digits")
    return RunState(run_id="t", writer=ResultsWriter(tmp_path / "run"), timing=FAST, weights=weights)


def test_apply_runs_outside_inference_mode_with_the_train_split(state):
    row = CaseRunner(state).run(Case("tiny_mlp", "test_fine_tune_step", "cpu", 4))
    assert row["status"] == "passed"
    assert SEEN["inference_mode"] is False and SEEN["grad"] is True
    assert SEEN["shapes"] == ((4, 3, 8, 8), "3x8x8", 4, "tiny_mlp", 0)  # batches of the case's size
    assert row["prepare_cached"] is None  # nothing cached: the column says so


def test_calibration_is_cached_across_batch_sizes_and_keyed_by_its_inputs(state, example, tmp_path):
    runner = CaseRunner(state)
    first = runner.run(Case("tiny_mlp", "act_fake_int8", "cpu", 4))
    again = runner.run(Case("tiny_mlp", "act_fake_int8", "cpu", 2))
    assert first["status"] == again["status"] == "passed"
    assert first["prepare_cached"] is False and again["prepare_cached"] is True
    saved = list((tmp_path / "cache" / "prepared").glob("act_fake_int8-tiny_mlp-ranges-*.pt"))
    assert len(saved) == 1
    # 8-bit activations of a well-trained MLP keep its predictions.
    assert first["top1"] >= 0.9 and first["agreement"] >= 0.95 and 0 < first["max_abs_error"]
    assert first["dtype"] == "float32 (int8-rounded activations)"


def test_cache_key_changes_with_weights_seed_and_extra_key(registries, tmp_path):
    spec = MODELS.get("tiny_mlp")
    calls = []

    def compute():
        calls.append(1)
        return {"t": torch.ones(2)}

    def ctx(**changes):
        base = dict(spec=spec, device=torch.device("cpu"), batch_size=2, input_shape="3x8x8",
                    weights_key="w1", cache_root=tmp_path)  # fmt: skip
        return TechniqueContext(**{**base, **changes}).for_technique("t", "code1")

    first = ctx()
    assert torch.equal(first.cached("s", compute, samples=8)["t"], torch.ones(2))
    assert first.from_cache is False
    hit = ctx(batch_size=16)  # batch size is not part of the key
    hit.cached("s", compute, samples=8)
    assert hit.from_cache is True and len(calls) == 1
    for other in (ctx(weights_key="w2"), ctx(seed=1)):
        other.cached("s", compute, samples=8)
    ctx().cached("s", compute, samples=16)
    ctx().for_technique("t", "code2").cached("s", compute, samples=8)
    assert len(calls) == 5


def test_train_split_without_a_task_is_a_clear_problem(registries):
    spec = MODELS.get("tiny_mlp")
    ctx = TechniqueContext(spec=spec, device=torch.device("cpu"), batch_size=2, input_shape="3x8x8")
    with pytest.raises(UsageProblem, match="needs the task's train split"):
        ctx.train_split()
