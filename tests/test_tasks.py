import pytest
import torch

from optbench.catalog.tasks.data_dir import check_data_dir
from optbench.catalog.tasks.digits import digits_task
from optbench.catalog.tasks.imagefolder import imagefolder_task
from optbench.catalog.tasks.marker_text import marker_text_task
from optbench.errors import UsageProblem


def test_digits_split_is_fixed_stratified_and_resized():
    task = digits_task(16)
    assert task.train_x.shape == (1437, 3, 16, 16) and task.eval_x.shape == (360, 3, 16, 16)
    held_out = torch.bincount(task.eval_y)
    total = held_out + torch.bincount(task.train_y)
    assert ((held_out - 0.2 * total).abs() <= 1).all()  # stratified: 20% of every class
    assert task.train_x.min() >= -1 and task.train_x.max() <= 1
    assert digits_task.__wrapped__(16).fingerprint == task.fingerprint  # same data every time
    assert digits_task(32).fingerprint != task.fingerprint


def test_marker_text_is_deterministic_and_labels_follow_the_markers():
    task = marker_text_task(32, 1000)
    again = marker_text_task.__wrapped__(32, 1000)
    assert torch.equal(task.train_x, again.train_x) and torch.equal(task.eval_y, again.eval_y)
    # The class with the most markers (tokens 1..50, 5 per class) is the label.
    markers = task.eval_x[(task.eval_x >= 1) & (task.eval_x <= 50)].view(len(task.eval_x), 5)
    votes = torch.stack([((markers - 1) // 5 == c).sum(1) for c in range(10)], dim=1)
    assert torch.equal(votes.argmax(1), task.eval_y)
    assert task.train_x.max() < 1000


def test_a_small_model_trains_on_digits_to_90_percent_quickly(registries, tmp_path):
    from optbench.catalog.checkpoint_training import train

    models, _ = registries
    spec = models.get("tiny_mlp").at_task_shape()
    model, result = train(spec, digits_task(spec.task_resolution), progress=False)
    assert result.top1 >= 0.9 and result.reached_target
    with torch.inference_mode():
        top1 = (model(digits_task(8).eval_x).argmax(1) == digits_task(8).eval_y).float().mean()
    assert float(top1) == pytest.approx(result.top1)


def test_untrained_model_is_near_chance_on_the_text_task(registries):
    from optbench.catalog.checkpoint_training import predict

    models, _ = registries
    spec = models.get("lstm_classifier").at_task_shape()
    task = marker_text_task(spec.task_seq_len, spec.vocab_size)
    torch.manual_seed(0)
    top1 = float((predict(spec.build_model().eval(), task.eval_x).argmax(1) == task.eval_y).float().mean())
    assert top1 < 0.2


def _image(path, color):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (20, 20), color).save(path)


def test_imagefolder_data_dir(tmp_path):
    for i in range(3):
        _image(tmp_path / "val" / "cat" / f"{i}.png", (200, 10, 10))
        _image(tmp_path / "val" / "dog" / f"{i}.png", (10, 10, 200))
        _image(tmp_path / "train" / "cat" / f"{i}.png", (200, 10, 10))
        _image(tmp_path / "train" / "dog" / f"{i}.png", (10, 10, 200))
    task = imagefolder_task(tmp_path, 16)
    assert task.num_classes == 2 and task.eval_x.shape == (6, 3, 16, 16) and len(task.train_y) == 6
    assert task.eval_y.tolist() == [0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize(
    "layout, message",
    [
        (None, "does not exist"),
        ({}, "is empty"),
        ({"a.png": None}, "has no class folders"),
        ({"cat/": None}, "has class folders but no images"),
    ],
)
def test_bad_data_dirs_are_one_clear_line(tmp_path, layout, message):
    root = tmp_path / "data"
    if layout is not None:
        root.mkdir()
        for name in layout:
            if name.endswith("/"):
                (root / name).mkdir()
            else:
                _image(root / name, (0, 0, 0))
    with pytest.raises(UsageProblem, match=message):
        check_data_dir(root)
