"""Quantization and pruning techniques on tiny models: shapes, dtypes, sparsity reached, sizes,
sparse-vs-dense agreement, calibration data, and skips for missing libraries."""

import sys
from dataclasses import replace

import pytest
import torch
from torch import nn

from optbench.catalog import compression, cost
from optbench.catalog.models import TrainRecipe, image_classifier, text_classifier
from optbench.catalog.tasks.base import TaskData
from optbench.catalog.techniques import Prepared, TechniqueContext, load_techniques, resolve
from optbench.catalog.techniques.linear_csr import CsrLinear
from optbench.catalog.techniques.prune_unstructured import prunable, zero_fraction
from optbench.errors import UsageProblem

RES = 16
RECIPE = TrainRecipe(lr=1e-3, batch_size=16)


def tiny_cnn(num_classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, num_classes),
    )


class TinyText(nn.Module):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 64)
        self.lstm = nn.LSTM(64, 64, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU())
        self.head = nn.Linear(256, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.lstm(self.embed(ids))[0][:, -1]
        return self.head(self.mlp(h))


CNN = image_classifier("tiny_cnn_c", tiny_cnn, resolution=RES, tags={"cnn"}, recipe=RECIPE)
TEXT = text_classifier("tiny_text_c", TinyText, seq_len=8, vocab_size=50, recipe=RECIPE)


def image_task(train_scale: float = 1.0, eval_scale: float = 1.0) -> TaskData:
    gen = torch.Generator().manual_seed(0)
    return TaskData(
        "tiny_images",
        train_x=torch.rand(64, 3, RES, RES, generator=gen) * train_scale,
        train_y=torch.randint(0, 10, (64,), generator=gen),
        eval_x=torch.rand(32, 3, RES, RES, generator=gen) * eval_scale,
        eval_y=torch.randint(0, 10, (32,), generator=gen),
        num_classes=10,
    )


def text_task() -> TaskData:
    gen = torch.Generator().manual_seed(0)
    return TaskData(
        "tiny_text",
        train_x=torch.randint(0, 50, (64, 8), generator=gen),
        train_y=torch.randint(0, 10, (64,), generator=gen),
        eval_x=torch.randint(0, 50, (32, 8), generator=gen),
        eval_y=torch.randint(0, 10, (32,), generator=gen),
        num_classes=10,
    )


@pytest.fixture(scope="module", autouse=True)
def techniques():
    load_techniques()


def prepare(name: str, spec, task: TaskData, tmp_path, **ctx_kwargs) -> tuple[Prepared, Prepared]:
    """(eager, after the technique), from the same seeded weights."""
    torch.manual_seed(0)
    model = spec.build_model().eval()
    inputs = spec.example_inputs(4, torch.Generator().manual_seed(0))
    ctx = TechniqueContext(
        spec=spec,
        device=torch.device("cpu"),
        batch_size=4,
        input_shape=spec.input_shape,
        task=task,
        cache_root=tmp_path,
        show_progress=False,
        **ctx_kwargs,
    )
    tech = resolve(name)
    reason = tech.supports(spec, "cpu", "inference")
    if reason:
        pytest.skip(reason)
    eager = Prepared.eager(spec.build_model().eval(), inputs)
    eager.module.load_state_dict(model.state_dict())
    return eager, tech.apply(Prepared.eager(model, inputs), ctx.for_technique(name, tech.code_hash()))


def run(prepared: Prepared) -> torch.Tensor:
    with torch.inference_mode():
        return prepared.forward(*prepared.inputs)


@pytest.mark.parametrize(
    "name, spec, task",
    [
        ("int8_dynamic", TEXT, text_task),
        ("torchao_int8_dynamic", TEXT, text_task),
        ("torchao_int8_weight_only", TEXT, text_task),
        ("int8_static_fx", CNN, image_task),
        ("prune_l1_70", CNN, image_task),
        ("prune_l1_70", TEXT, text_task),
        ("prune_channels_50", CNN, image_task),
        ("prune_channels_50+int8_static_fx", CNN, image_task),
        ("prune_l1_70+int8_dynamic", TEXT, text_task),
        ("prune_l1_90+linear_csr", TEXT, text_task),
    ],
)
def test_output_shape_and_size(name, spec, task, tmp_path):
    eager, prepared = prepare(name, spec, task(), tmp_path)
    out, ref = run(prepared), run(eager)
    assert out.shape == ref.shape == (4, 10)
    assert torch.isfinite(out).all()
    fp32_size = cost.model_sizes(eager.module)[1]
    if "int8" in name or "prune" in name:  # every one of these stores less once compressed
        assert cost.model_sizes(prepared.module)[1] < fp32_size
    params, nonzero = cost.parameter_counts(prepared.module)
    assert 0 < nonzero <= params


def test_int8_weights_are_int8_and_counted(tmp_path):
    eager, dyn = prepare("int8_dynamic", TEXT, text_task(), tmp_path)
    assert dyn.module.head.weight().dtype == torch.qint8
    assert dyn.module.lstm.get_weight()["weight_ih_l0"].dtype == torch.qint8
    # Packed int8 weights are not parameters: they are still counted, as many as fp32 had.
    assert cost.parameter_counts(dyn.module)[0] == cost.parameter_counts(eager.module)[0]
    _, fx = prepare("int8_static_fx", CNN, image_task(), tmp_path)
    convs = [m for m in fx.module.modules() if isinstance(m, torch.ao.nn.quantized.modules.conv._ConvNd)]
    assert convs and all(m.weight().dtype == torch.qint8 for m in convs)
    _, ao = prepare("torchao_int8_dynamic", TEXT, text_task(), tmp_path)
    assert cost._plain(ao.module.head.weight.detach()).dtype == torch.int8
    assert dyn.dtype.startswith("int8") and fx.dtype == "int8"
    assert "quantize_dynamic" in dyn.api and "quantize_fx" in fx.api and "torchao" in ao.api


@pytest.mark.parametrize("percent", [50, 70, 90])
def test_unstructured_pruning_reaches_its_sparsity(percent, tmp_path):
    _, prepared = prepare(f"prune_l1_{percent}", CNN, image_task(), tmp_path)
    reached = zero_fraction(prunable(prepared.module))
    assert reached == pytest.approx(percent / 100, abs=0.005)
    assert prepared.columns["sparsity"] == pytest.approx(reached)
    assert prepared.columns["finetune_samples"] > 0
    # Permanent: no masks or reparametrization left behind.
    assert not any(name.endswith("_orig") for name, _ in prepared.module.named_parameters())


def test_structured_pruning_removes_channels_and_flops(tmp_path):
    eager, prepared = prepare("prune_channels_50", CNN, image_task(), tmp_path)
    before, after = cost.parameter_counts(eager.module)[0], cost.parameter_counts(prepared.module)[0]
    assert after < 0.5 * before
    assert prepared.module[0].out_channels == 8  # half of 16 removed outright
    assert prepared.flops_per_sample < cost.count_flops(eager.module, eager.inputs) / 4 * 0.5
    assert cost.model_sizes(prepared.module)[0] < 0.5 * cost.model_sizes(eager.module)[0]


def test_structured_pruning_keeps_multiples_of_8_channels(tmp_path):
    # Removing 30% of 16 and 32 channels leaves counts that are not multiples of 8 (int8 depthwise
    # convolutions with such counts can hit a ~100x slower kernel); torch-pruning rounds to 8 and 16.
    _, prepared = prepare("prune_channels_30", CNN, image_task(), tmp_path)
    kept = [m.out_channels for m in prepared.module.modules() if isinstance(m, nn.Conv2d)]
    assert kept == [8, 16]


def test_fine_tune_is_cached_and_reused(tmp_path):
    _, first = prepare("prune_l1_50", CNN, image_task(), tmp_path)
    _, again = prepare("prune_l1_50", CNN, image_task(), tmp_path)
    assert list((tmp_path / "prepared").glob("prune_l1_50-*")), "fine-tuned weights were not cached"
    first_state, again_state = first.module.state_dict(), again.module.state_dict()
    assert first_state.keys() == again_state.keys()
    for key, value in first_state.items():
        assert torch.equal(value, again_state[key]), key


@pytest.mark.parametrize("name", ["prune_l1_50", "prune_channels_30"])
def test_fine_tunes_are_keyed_by_the_trainers_code_and_the_device(tmp_path, monkeypatch, name):
    """Weights fine-tuned by other trainer code, or on another device (whose layout and autocast the
    fine-tune follows), are never read back as these: both prunings key their cache alike."""
    keys = []
    original = TechniqueContext.cached

    def spy(self, kind, compute, **key):
        keys.append((kind, key))
        return original(self, kind, compute, **key)

    monkeypatch.setattr(TechniqueContext, "cached", spy)
    prepare(name, CNN, image_task(), tmp_path)
    ((kind, key),) = [k for k in keys if k[0] == "finetuned"]
    assert key["fine_tune"] == compression.code_hash() and key["device"] == "cpu"
    cuda = TechniqueContext(spec=CNN, device=torch.device("cuda"), batch_size=4, input_shape=CNN.input_shape)
    assert compression.finetune_key(cuda)["device"] == "cuda"


def test_a_cnn_fine_tunes_channels_last_and_leaves_in_the_layout_it_came_in(tmp_path, monkeypatch):
    """The fine-tune runs a CNN's steps in channels_last (the CPU's fast layout for them); the timed
    model keeps its own layout: contiguous alone, channels_last after the channels_last technique."""
    from optbench.catalog import checkpoint_training
    from optbench.catalog.checkpoint_training import training_layout

    assert training_layout(CNN, CNN.build_model(), image_task().train_x) == torch.channels_last
    assert training_layout(TEXT, TEXT.build_model(), text_task().train_x) == torch.contiguous_format
    layouts = []
    forward = nn.Conv2d.forward

    def spy(self, x):
        if self.training:
            layouts.append(x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous())
        return forward(self, x)

    monkeypatch.setattr(nn.Conv2d, "forward", spy)
    # BatchNorm's statistics are recomputed after the model is back in its own layout: not a step
    monkeypatch.setattr(checkpoint_training, "recalibrate_batchnorm", lambda *args: None)
    _, pruned = prepare("prune_l1_50", CNN, image_task(), tmp_path)
    assert layouts and all(layouts)  # every fine-tuning step saw channels_last inputs
    assert all(p.is_contiguous() for p in pruned.module.parameters())
    # A model that came in channels_last (a stack's earlier technique) leaves in channels_last.
    layouts.clear()
    model = CNN.build_model().to(memory_format=torch.channels_last)
    ctx = TechniqueContext(
        spec=CNN, device=torch.device("cpu"), batch_size=4, input_shape=CNN.input_shape,
        task=image_task(), cache_root=tmp_path, show_progress=False,
    )  # fmt: skip
    compression.fine_tune(model, CNN, ctx.for_technique("test", "0"))
    assert layouts and all(layouts)
    assert all(not p.is_contiguous() for p in model.parameters() if p.dim() == 4 and p.shape[1] > 1)


class FlatCnn(nn.Module):
    """A user's CNN that flattens with view, which a channels_last activation refuses."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4 * RES * RES, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x))
        return self.head(h.view(len(h), -1))


def test_a_cnn_whose_forward_refuses_channels_last_trains_in_the_default_layout():
    from optbench.catalog.checkpoint_training import train, training_layout

    spec = image_classifier("flat_cnn_c", FlatCnn, resolution=RES, recipe=RECIPE)
    model, task = spec.build_model(), image_task()
    assert training_layout(spec, model, task.train_x) == torch.contiguous_format
    assert all(p.is_contiguous() for p in model.parameters())  # the probe left it as it was
    trained, result = train(spec, replace(task, epochs=1), progress=False)
    assert result.epochs == 1 and all(p.is_contiguous() for p in trained.parameters())


def test_unstructured_pruning_after_channels_last_prunes_and_keeps_the_layout(tmp_path):
    """torch's l1_unstructured views each weight flat, which a channels_last weight refuses: the
    stack channels_last+prune_l1_50 failed with a RuntimeError before."""
    _, pruned = prepare("channels_last+prune_l1_50", CNN, image_task(), tmp_path)
    convs = [m.weight for m in pruned.module.modules() if isinstance(m, nn.Conv2d)]
    assert all(w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous() for w in convs)
    assert zero_fraction(prunable(pruned.module)) == pytest.approx(0.5, abs=0.02)


@pytest.mark.parametrize("sparsity", [0.0, 0.5, 0.9])
def test_csr_linear_matches_dense(sparsity):
    torch.manual_seed(0)
    dense = nn.Linear(64, 48)
    with torch.no_grad():
        dense.weight[torch.rand_like(dense.weight) < sparsity] = 0
    x = torch.randn(2, 5, 64)
    assert torch.allclose(CsrLinear(dense)(x), dense(x), atol=1e-5)


def test_calibration_uses_train_data_not_held_out(tmp_path):
    # Train inputs in [0, 1], held-out in [0, 100]: the input quantizer's range shows which it saw.
    task = image_task(train_scale=1.0, eval_scale=100.0)
    _, prepared = prepare("int8_static_fx", CNN, task, tmp_path, calibration_samples=32)
    scales = [float(v) for k, v in prepared.module.state_dict().items() if k.endswith("input_scale_0")]
    # x86's qconfig quantizes activations to 0..127 (reduce_range): [0, 1] gives 1/127, [0, 100] 100/127.
    assert scales and scales[0] == pytest.approx(1 / 127, rel=0.05)
    assert prepared.columns["calibration_samples"] == 32


@pytest.mark.parametrize("name", ["int8_static_fx", "int8_static_pt2e"])
def test_calibration_is_cached_and_keyed_by_the_weights_it_calibrates(name, tmp_path):
    _, first = prepare(name, CNN, image_task(), tmp_path, calibration_samples=16)
    saved = sorted((tmp_path / "prepared").glob(f"{name}-*-calibration-*.pt"))
    assert len(saved) == 1
    stamp = saved[0].stat().st_mtime_ns
    _, again = prepare(name, CNN, image_task(), tmp_path, calibration_samples=16)
    assert saved[0].stat().st_mtime_ns == stamp  # read, not written again
    assert again.columns["calibration_samples"] == 16
    x = CNN.example_inputs(4, torch.Generator().manual_seed(1))
    assert torch.equal(run_on(first, x), run_on(again, x))  # the same quantized model
    # Other weights in (a technique earlier in a stack changed them): calibrated anew.
    torch.manual_seed(0)
    model = CNN.build_model().eval()
    with torch.no_grad():
        model[0].weight.mul_(2)
    ctx = TechniqueContext(spec=CNN, device=torch.device("cpu"), batch_size=4, input_shape=CNN.input_shape,
                           task=image_task(), cache_root=tmp_path, show_progress=False, calibration_samples=16)  # fmt: skip
    tech = resolve(name)
    tech.apply(Prepared.eager(model, x), ctx.for_technique(name, tech.code_hash()))
    assert len(list((tmp_path / "prepared").glob(f"{name}-*-calibration-*.pt"))) == 2


def run_on(prepared: Prepared, x: tuple[torch.Tensor, ...]) -> torch.Tensor:
    with torch.inference_mode():
        return prepared.forward(*x)


def test_calibration_batches_come_at_the_prepared_shape(tmp_path):
    task = image_task()
    deploy = image_classifier("tiny_cnn_c2", tiny_cnn, resolution=32, task_resolution=RES, tags={"cnn"})
    ctx = TechniqueContext(
        spec=deploy,
        device=torch.device("cpu"),
        batch_size=8,
        input_shape="3x32x32",
        task=task,
        calibration_samples=20,
    )
    batches = list(ctx.calibration_batches())
    assert [tuple(b.shape) for b in batches] == [(8, 3, 32, 32), (8, 3, 32, 32), (4, 3, 32, 32)]


def test_missing_library_is_a_skip_naming_the_package(monkeypatch):
    compression.missing.cache_clear()
    monkeypatch.setitem(sys.modules, "torch_pruning", None)  # import fails as if not installed
    try:
        reason = resolve("prune_channels_50").supports(CNN, "cpu", "inference")
        assert reason and "pip install torch-pruning" in reason
    finally:
        compression.missing.cache_clear()


def test_removed_api_is_a_skip_naming_the_package(monkeypatch):
    import torchao.quantization as tq

    compression.missing.cache_clear()
    monkeypatch.delattr(tq, "Int8WeightOnlyConfig")
    reason = resolve("torchao_int8_weight_only").supports(TEXT, "cpu", "inference")
    assert reason and "torchao" in reason and "Int8WeightOnlyConfig" in reason


def test_techniques_skip_models_they_do_not_fit():
    assert "below 50%" in resolve("int8_dynamic").supports(CNN, "cpu", "inference")
    assert "targets convolutional networks" in resolve("int8_static_fx").supports(TEXT, "cpu", "inference")
    assert "CUDA" in resolve("sparse_2to4").supports(TEXT, "cuda", "inference") or torch.cuda.is_available()


def test_untraceable_layer_is_named():
    class Branchy(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x  # data-dependent control flow: FX cannot trace it

    model = nn.Sequential(nn.Conv2d(3, 4, 3), Branchy())
    with pytest.raises(compression.ConversionError, match=r"layer '1' \(Branchy\)"):
        compression.check_traceable(model, "FX graph mode quantization")


@pytest.mark.parametrize("name", ["prune_l1_0", "prune_l1_100", "prune_channels_95"])
def test_levels_outside_their_range_are_usage_errors(name):
    with pytest.raises(UsageProblem, match=r"takes N, the .* from 1 to (99|90)"):
        resolve(name)


def test_other_levels_can_be_asked_for():
    assert resolve("prune_l1_80").percent == 80
    assert resolve("prune_channels_20+int8_static_fx").name == "prune_channels_20+int8_static_fx"


@pytest.mark.parametrize(("channels", "noted"), [(12, True), (16, False)])
def test_int8_depthwise_with_channels_off_a_multiple_of_8_gets_a_kernel_note(channels, noted):
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    from optbench.catalog.techniques.int8_static import slow_depthwise_note

    model = nn.Sequential(
        nn.Conv2d(3, channels, 1), nn.Conv2d(channels, channels, 3, padding=1, groups=channels)
    ).eval()
    x = torch.randn(2, 3, 8, 8)
    observed = prepare_fx(model, get_default_qconfig_mapping("x86"), (x,))
    observed(x)
    note = slow_depthwise_note(convert_fx(observed))
    if noted:
        assert note is not None and note.startswith("1 int8 depthwise convolution(s)") and "(12)" in note
    else:
        assert note is None
