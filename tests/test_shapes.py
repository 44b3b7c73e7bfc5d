"""Deployment and task shapes: a shape-tied model's trained weights serve both, in any order."""

import torch

from optbench.catalog.models import MODELS
from optbench.catalog.weights import ModelWeights


def test_vit_weights_trained_at_the_task_shape_build_at_both_shapes_repeatedly(registries):
    spec = MODELS.get("vit_b_16")
    task, deploy = spec.at_shape("task"), spec.at_shape("deploy")
    assert (task.input_shape, deploy.input_shape) == ("3x32x32", "3x224x224") and spec.shape_tied
    torch.manual_seed(0)
    trained = task.build_model().state_dict()
    weights = ModelWeights(
        spec=deploy, state_dict=trained, task=None, source="test", made_at=task.input_shape
    )
    # Deployment first, then the task shape, then again: adapting must not edit the stored weights.
    for at in (deploy, task, deploy, task):
        model = weights.build(at)
        positions = model.encoder.pos_embedding.shape[1]
        assert positions == (at.resolution // 16) ** 2 + 1
        with torch.inference_mode():
            assert model(torch.randn(1, 3, at.resolution, at.resolution)).shape == (1, 10)
    assert weights.state_dict["encoder.pos_embedding"].shape[1] == 5
    # The class token and patch weights carry over unchanged; positions are interpolated.
    at_deploy = weights.build(deploy).state_dict()
    assert torch.equal(at_deploy["class_token"], trained["class_token"])
    assert torch.equal(at_deploy["conv_proj.weight"], trained["conv_proj.weight"])


def test_cnn_and_text_specs_default_task_shape_to_the_deployment_shape(registries):
    from torch import nn

    from optbench import image_classifier, text_classifier

    cnn = image_classifier("shape_probe_cnn", lambda n: nn.Linear(1, n), resolution=64)
    assert cnn.at_shape("task").input_shape == cnn.at_shape("deploy").input_shape == "3x64x64"
    text = text_classifier("shape_probe_text", lambda n: nn.Linear(1, n), seq_len=40, vocab_size=100,
                           task_seq_len=20)  # fmt: skip
    assert (text.at_shape("deploy").input_shape, text.at_shape("task").input_shape) == ("seq40", "seq20")
