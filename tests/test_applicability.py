"""Which techniques apply to a model is read from the model's layers, never from tags a user must
know to set."""

from __future__ import annotations

from torch import nn

from optbench.catalog.compression import structure
from optbench.catalog.models import image_classifier, text_classifier
from optbench.catalog.techniques import load_techniques, resolve


class ConvNet(nn.Module):  # a user's convolutional network, untagged
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Conv2d(16, 32, 3), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes))

    def forward(self, x):
        return self.head(self.body(x))


class LinearNet(nn.Module):  # a user's text model of Linear layers only, untagged
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 64)
        self.mlp = nn.Sequential(
            nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, num_classes)
        )

    def forward(self, ids):
        return self.mlp(self.embed(ids).mean(1))


def test_an_untagged_conv_model_gets_static_int8_and_channel_pruning():
    load_techniques()
    spec = image_classifier("user_convnet", ConvNet, resolution=32)
    assert "cnn" not in spec.tags  # the user set no tag
    assert structure(spec).convolutions == 2 and not structure(spec).attention
    for name in ("int8_static_fx", "int8_static_pt2e", "prune_channels_50"):
        assert resolve(name).supports(spec, "cpu", "inference") is None, name


def test_an_untagged_linear_model_gets_dynamic_int8_and_not_the_conv_techniques():
    load_techniques()
    spec = text_classifier("user_linear", LinearNet, seq_len=16, vocab_size=100)
    assert structure(spec).linear_share > 0.5
    assert resolve("int8_dynamic").supports(spec, "cpu", "inference") is None
    assert "has no convolution layers" in resolve("int8_static_fx").supports(spec, "cpu", "inference")


class WideVocabularyEncoder(nn.Module):  # a small transformer whose token table outweighs its layers
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(30522, 128)
        layer = nn.TransformerEncoderLayer(128, 2, 256, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(128, num_classes)

    def forward(self, ids):
        return self.head(self.encoder(self.embed(ids))[:, 0])


def test_embedding_tables_do_not_hide_a_transformer_from_dynamic_int8():
    # Its token table holds 88% of the weights, but no arithmetic: the layers that compute are Linear.
    load_techniques()
    spec = text_classifier("user_small_bert", WideVocabularyEncoder, seq_len=16, vocab_size=30522)
    assert structure(spec).linear_share > 0.9
    for name in ("int8_dynamic", "torchao_int8_dynamic", "linear_csr"):
        assert resolve(name).supports(spec, "cpu", "inference") is None, name


def test_a_model_mostly_of_other_layers_is_not_linear_heavy():
    class NormHeavy(nn.Module):
        def __init__(self, num_classes: int) -> None:
            super().__init__()
            self.convs = nn.Sequential(nn.Conv2d(3, 256, 3), nn.Conv2d(256, 256, 3))
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, num_classes))

        def forward(self, x):
            return self.head(self.convs(x))

    load_techniques()
    spec = image_classifier("user_convs", NormHeavy, resolution=32)
    assert structure(spec).linear_share < 0.1
    assert "below 50%" in resolve("int8_dynamic").supports(spec, "cpu", "inference")


def test_a_builder_that_raises_is_a_failed_case_later_never_a_collection_error():
    load_techniques()

    def broken(num_classes: int, extra: int) -> nn.Module:  # the wrong signature
        raise AssertionError("not called")

    spec = text_classifier("user_broken", broken, seq_len=16, vocab_size=100)
    assert structure(spec).error.startswith("TypeError")
    assert resolve("int8_dynamic").supports(spec, "cpu", "inference") is None
    assert resolve("int8_static_fx").supports(spec, "cpu", "inference") is None


def test_a_model_the_data_pipeline_cannot_feed_has_its_data_cases_skipped_with_the_reason(registries):
    from optbench.matrix.case import Selection, build_matrix

    selection = Selection(
        models=["lstm_classifier"], techniques=None, devices=["cpu"], batch_sizes=None, profile="smoke"
    )
    cases = build_matrix(selection, "data")
    assert cases and all(c.skip_reason for c in cases)
    (eager,) = [c for c in cases if c.technique == "eager"]
    assert (
        eager.skip_reason
        == "the data pipeline feeds JPEG images; lstm_classifier takes text_classification inputs"
    )
