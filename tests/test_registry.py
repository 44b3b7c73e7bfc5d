import pytest

from optbench.catalog.registry import Registry
from optbench.errors import UnknownNameError

ZOO = {
    "resnet18",
    "resnet50",
    "mobilenet_v3_large",
    "efficientnet_b0",
    "vit_b_16",
    "vit_ti_16",
    "bert_base_encoder",
    "bert_mini_encoder",
    "lstm_classifier",
}
FIRST_TECHNIQUES = {"eager", "channels_last", "bf16_autocast", "fp16_autocast", "compile"}


def test_unknown_name_lists_valid_choices():
    reg: Registry[int] = Registry("model")
    reg.add("a", 1)
    reg.add("b", 2)
    with pytest.raises(UnknownNameError) as info:
        reg.get("c")
    assert str(info.value) == "unknown model 'c'; valid models: a, b"
    with pytest.raises(UnknownNameError, match=r"unknown models 'x', 'y'; valid models: a, b"):
        reg.check(["a", "x", "y"])


def test_same_name_from_two_files_is_an_error_but_reimport_is_not():
    reg: Registry[int] = Registry("model")
    reg.add("a", 1, origin="one.py")
    reg.add("a", 2, origin="one.py")
    assert reg.get("a") == 2
    with pytest.raises(ValueError, match="registered twice"):
        reg.add("a", 3, origin="two.py")


def test_zoo_and_techniques_are_registered(registries):
    models, techniques = registries
    assert ZOO <= set(models.names())
    assert FIRST_TECHNIQUES <= set(techniques.names())
    for name in ZOO:
        spec = models.get(name)
        assert spec.task in {"image_classification", "text_classification"}
        assert spec.source.endswith(".py") and spec.code_hash()
    assert models.get("resnet18").input_shape == "3x224x224"
    assert models.get("bert_base_encoder").input_shape == "seq128"
    assert techniques.get("eager").family == "baseline"
    assert techniques.get("compile").api.startswith("torch.compile")


def test_zoo_models_build_and_run_on_their_example_inputs(registries):
    import torch

    models, _ = registries
    for name in ("resnet18", "lstm_classifier"):
        spec = models.get(name)
        model = spec.build_model().eval()
        inputs = spec.example_inputs(2, torch.Generator().manual_seed(0))
        with torch.inference_mode():
            out = model(*inputs)
        assert out.shape == (2, spec.num_classes)


def test_user_model_folder_registers_its_models(tmp_path, registries):
    from optbench.catalog.models import MODELS, load_user_dir
    from optbench.errors import UsageProblem

    (tmp_path / "my_net.py").write_text(
        "from torch import nn\n"
        "from optbench import image_classifier, register_model\n"
        "register_model(image_classifier('user_net_unit', lambda n: nn.Sequential(nn.Flatten(), nn.Linear(48, n)),"
        " resolution=4))\n"
    )
    assert load_user_dir(tmp_path) == ["my_net.py"]
    assert MODELS.get("user_net_unit").source == str(tmp_path / "my_net.py")

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "bad.py").write_text("def broken(:\n")
    with pytest.raises(UsageProblem, match="could not load .*bad.py: SyntaxError"):
        load_user_dir(broken)


def test_wildcards_and_tags_select_models_and_techniques(registries):
    models, techniques = registries
    assert models.list("resnet*") == ["resnet18", "resnet50"]
    tags = lambda spec: spec.tags  # noqa: E731
    assert models.expand(["tag:transformer"], tags) == [
        "bert_base_encoder",
        "bert_mini_encoder",
        "vit_b_16",
        "vit_ti_16",
    ]
    # In the order given, without repeats; plain names must exist, patterns must match something.
    assert models.expand(["resnet50", "resnet*"], tags) == ["resnet50", "resnet18"]
    assert techniques.expand(["*autocast"], lambda t: {t.family}) == ["bf16_autocast", "fp16_autocast"]
    assert techniques.expand(["tag:layout"], lambda t: {t.family}) == ["channels_last"]
    with pytest.raises(UnknownNameError, match="no model matches 'nope\\*'; valid models: "):
        models.expand(["nope*"], tags)
    with pytest.raises(UnknownNameError, match="unknown model 'nope'"):
        models.expand(["nope"], tags)


def test_pretrained_preprocessing_comes_from_the_weights(registries):
    from optbench.catalog.weights import pretrained_preprocess

    models, _ = registries
    resize, crop, mean, std = pretrained_preprocess(models.get("vit_b_16"))
    assert (resize, crop) == (256, 224) and mean == (0.485, 0.456, 0.406) and std == (0.229, 0.224, 0.225)
    assert pretrained_preprocess(models.get("efficientnet_b0"))[:2] == (256, 224)
    assert pretrained_preprocess(models.get("bert_base_encoder")) is None
    assert pretrained_preprocess(models.get("tiny_mlp")) is None
