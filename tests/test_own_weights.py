"""`--weights own`: a spec's own weights file or loader, the text data format, and the one-line errors
(missing file, weights that do not fit, classes that do not match the data, bad token ids)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

from optbench.catalog.models import image_classifier, text_classifier
from optbench.catalog.own_weights import check_own_weights_file, own_weights_file
from optbench.catalog.tasks.data_dir import check_data_dir
from optbench.catalog.tasks.token_file import PAD_ID, read_token_file
from optbench.catalog.weights import WeightsProvider
from optbench.errors import UsageProblem

VOCAB, SEQ = 50, 6


def image_net(num_classes: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, num_classes))


def text_net(num_classes: int) -> nn.Module:
    return nn.Sequential(nn.Embedding(VOCAB, 4), nn.Flatten(), nn.Linear(4 * SEQ, num_classes))


def saved(path: Path, model: nn.Module) -> Path:
    torch.save(model.state_dict(), path)
    return path


def image_folder(root: Path, classes: int) -> Path:
    from PIL import Image

    for c in range(classes):
        (root / f"class{c}").mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (10, 10), (40 * c + i, 0, 0)).save(root / f"class{c}" / f"{i}.png")
    return root


def token_lines(folder: Path, items: list[dict]) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "eval.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
    return folder


def test_a_text_model_is_evaluated_with_its_file_on_a_token_file(tmp_path):
    torch.manual_seed(1)
    model = text_net(3)
    spec = text_classifier("own_text", text_net, seq_len=SEQ, vocab_size=VOCAB, num_classes=3,
                           weights=saved(tmp_path / "text.pt", model))  # fmt: skip
    data = token_lines(
        tmp_path / "data", [{"tokens": [1, 2, 3], "label": 0}, {"tokens": list(range(9)), "label": 2}]
    )
    weights = WeightsProvider("own", data_dir=data).get(spec)
    x, y = weights.eval_set()
    assert x.tolist() == [[1, 2, 3, PAD_ID, PAD_ID, PAD_ID], [0, 1, 2, 3, 4, 5]] and y.tolist() == [0, 2]
    with torch.no_grad():  # the loaded weights are the saved ones
        assert torch.equal(weights.build(weights.eval_spec)(x), model.eval()(x))
    assert (
        weights.accuracy_source == f"your data ({data / 'eval.jsonl'}), own weights ({tmp_path / 'text.pt'})"
    )


def test_a_relative_file_is_read_beside_the_model_file_and_a_loader_may_return_a_module(tmp_path):
    (tmp_path / "models").mkdir()
    saved(tmp_path / "models" / "w.pt", image_net(10))
    spec = replace(image_classifier("rel", image_net, resolution=8, weights="w.pt"),
                   source=str(tmp_path / "models" / "rel.py"))  # fmt: skip
    assert own_weights_file(spec) == tmp_path / "models" / "w.pt"
    module = image_net(10)
    loaded = image_classifier("loaded", image_net, resolution=8, weights=lambda spec: module)
    weights = WeightsProvider("own").get(loaded)  # no --data-dir: the embedded hard digits, 10 classes
    assert weights.accuracy_source.startswith(
        "the embedded task (hard-digits-8px-seed0-v6x3-n0.3-f1000), own weights (loader "
    )
    assert torch.equal(weights.build().state_dict()["1.weight"], module.state_dict()["1.weight"])


def test_a_model_that_outputs_other_classes_than_the_data_is_one_line(tmp_path):
    spec = image_classifier("three_way", image_net, resolution=8, num_classes=3,
                            weights=saved(tmp_path / "w.pt", image_net(3)))  # fmt: skip
    data = image_folder(tmp_path / "data", 2)
    with pytest.raises(UsageProblem) as found:
        WeightsProvider("own", data_dir=data).get(spec)
    assert str(found.value) == f"three_way outputs 3 classes but {data} has 2 classes"
    with pytest.raises(
        UsageProblem, match="^three_way outputs 3 classes but the embedded task hard-digits-8px"
    ):
        WeightsProvider("own").get(spec)
    text = text_classifier("two_way", text_net, seq_len=SEQ, vocab_size=VOCAB, num_classes=2,
                           weights=saved(tmp_path / "t.pt", text_net(2)))  # fmt: skip
    data = token_lines(tmp_path / "text", [{"tokens": [1], "label": 4}])
    with pytest.raises(UsageProblem) as found:
        WeightsProvider("own", data_dir=data).get(text)
    assert str(found.value) == f"two_way outputs 2 classes but {data / 'eval.jsonl'} has labels up to 4"


def test_a_missing_or_unfitting_weights_file_is_one_line_naming_model_and_file(tmp_path):
    missing = image_classifier("gone", image_net, resolution=8, weights=tmp_path / "nope.pt")
    with pytest.raises(UsageProblem) as found:
        check_own_weights_file(missing)
    assert str(found.value) == f"--weights own: gone's weights file {tmp_path / 'nope.pt'} does not exist"
    with pytest.raises(UsageProblem, match="does not exist"):
        WeightsProvider("own").get(missing)
    wrong = image_classifier("wrong", image_net, resolution=8,
                             weights=saved(tmp_path / "w.pt", text_net(10)))  # fmt: skip
    with pytest.raises(UsageProblem) as found:
        WeightsProvider("own").get(wrong)
    line = str(found.value)
    assert "\n" not in line and line.startswith(
        f"--weights own: wrong's weights {tmp_path / 'w.pt'} do not fit"
    )
    assert 'Missing key(s) in state_dict: "1.weight"' in line and "Unexpected key(s)" in line
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    junk = image_classifier("junk", image_net, resolution=8, weights=tmp_path / "junk.pt")
    with pytest.raises(
        UsageProblem, match=r"^--weights own: junk's weights .*junk.pt could not be loaded \("
    ):
        WeightsProvider("own").get(junk)


def test_a_spec_without_weights_is_a_skipped_case_under_weights_own():
    plain = image_classifier("plain", image_net, resolution=8)
    reason = WeightsProvider("own").unavailable_reason(plain)
    assert reason == "--weights own: plain's spec names no weights of its own (its weights=)"


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"tokens": [1, 99], "label": 0}', "line 2: token id 99 is outside m's vocabulary (0 to 49)"),
        ('{"tokens": [1, 2], "label": -1}', "line 2: label -1 is negative"),
        ('{"tokens": [], "label": 0}', 'line 2: expected {"tokens": [ids, ...], "label": k}'),
        ('{"tokens": [1.5], "label": 0}', 'line 2: expected {"tokens": [ids, ...], "label": k}'),
        ("[1, 2", "line 2 is not JSON"),
    ],
)
def test_bad_token_files_are_one_line_naming_file_and_line(tmp_path, line, message):
    file = tmp_path / "eval.jsonl"
    file.write_text('{"tokens": [1], "label": 0}\n' + line + "\n")
    with pytest.raises(UsageProblem) as found:
        read_token_file(file, SEQ, VOCAB, "m")
    assert str(found.value).startswith(f"--data-dir {file} ") and message in str(found.value)


def test_a_data_dir_may_hold_text_only_images_only_or_both(tmp_path):
    token_lines(tmp_path / "text", [{"tokens": [1], "label": 0}])
    check_data_dir(tmp_path / "text")  # text models read it; image models stay on their embedded task
    check_data_dir(image_folder(tmp_path / "both", 2))
    token_lines(tmp_path / "both", [{"tokens": [1], "label": 0}])
    check_data_dir(tmp_path / "both")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(UsageProblem, match="has no class folders .* and no eval.jsonl for text models"):
        check_data_dir(tmp_path / "other")


def test_pretrained_labels_follow_the_class_folder_names():
    """An ImageFolder's label i is its i-th folder (alphabetical), not ImageNet's class i: labels
    are matched by name, and folders that are no category of the weights are one line."""
    from optbench.catalog.tasks.base import TaskData
    from optbench.catalog.weights import to_categories

    x = torch.zeros(3, 3, 4, 4)
    task = TaskData("t", x[:0], torch.zeros(0, dtype=torch.long), x, torch.tensor([0, 1, 1]), 2,
                    origin="DIR", classes=("goldfish", "tench"))  # fmt: skip
    mapped = to_categories(task, ["tench", "goldfish", "great white shark"], "resnet18's weights")
    assert mapped.eval_y.tolist() == [1, 0, 0] and mapped.num_classes == 3
    odd = TaskData("t", x[:0], torch.zeros(0, dtype=torch.long), x, torch.tensor([0, 1, 1]), 2,
                   origin="DIR", classes=("a", "tench"))  # fmt: skip
    with pytest.raises(
        UsageProblem, match=r"outputs 3 classes, and DIR's class folders 'a' are not among them"
    ):
        to_categories(odd, ["tench", "goldfish", "great white shark"], "resnet18's weights")
