"""`pytest bench/ --weights own --data-dir DIR` in a user's repository: small models saved to files,
named by their specs, evaluated on a tiny ImageFolder and a tiny eval.jsonl without training."""

from __future__ import annotations

import json
import textwrap

import pandas as pd
import pytest
import torch
from bench_process import run_bench
from torch import nn
from user_repo import USER_BENCH

MODELS = """
from torch import nn
from optbench import image_classifier, register_model, text_classifier


def image_net(num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, num_classes))


def text_net(num_classes):
    return nn.Sequential(nn.Embedding(50, 4), nn.Flatten(), nn.Linear(4 * 6, num_classes))


register_model(image_classifier("own_image", image_net, resolution=8, num_classes=2, weights="own_image.pt"))
register_model(text_classifier("own_text", text_net, seq_len=6, vocab_size=50, num_classes=3, weights="own_text.pt"))
register_model(image_classifier("five_way", image_net, resolution=8, num_classes=5, weights="five_way.pt"))
register_model(image_classifier("no_weights", image_net, resolution=8))
"""

COLORS = {
    "a": [(200, 30, 30), (30, 200, 30), (30, 30, 200)],
    "b": [(250, 250, 250), (5, 5, 5), (120, 60, 200)],
}
SEQUENCES = [([1, 2, 3], 0), ([4, 5, 6, 7, 8, 9, 10], 1), ([11], 2), ([12, 13, 14, 15], 0), ([49, 48], 1)]
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def image_net(num_classes: int) -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, num_classes))


def text_net(num_classes: int) -> nn.Module:
    return nn.Sequential(nn.Embedding(50, 4), nn.Flatten(), nn.Linear(4 * 6, num_classes))


def direct_top1(model: nn.Module, x: torch.Tensor, labels: list[int]) -> float:
    with torch.no_grad():
        return (model.eval()(x).argmax(1) == torch.tensor(labels)).float().mean().item()


def test_own_weights_are_evaluated_on_the_users_images_and_text_without_training(tmp_path):
    from PIL import Image

    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "nets.py").write_text(textwrap.dedent(MODELS))
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "test_inference.py").write_text(textwrap.dedent(USER_BENCH))
    torch.manual_seed(3)
    image_model, text_model = image_net(2), text_net(3)
    torch.save(image_model.state_dict(), tmp_path / "models" / "own_image.pt")  # beside the model file
    torch.save(text_model.state_dict(), tmp_path / "models" / "own_text.pt")
    torch.save(image_net(5).state_dict(), tmp_path / "models" / "five_way.pt")
    data = tmp_path / "data"
    for name, colors in COLORS.items():  # one color per image: resizing and cropping keep it exactly
        (data / name).mkdir(parents=True)
        for i, color in enumerate(colors):
            Image.new("RGB", (12, 10), color).save(data / name / f"{i}.png")
    (data / "eval.jsonl").write_text(
        "".join(json.dumps({"tokens": t, "label": k}) + "\n" for t, k in SEQUENCES)
    )

    out = run_bench("bench/", "--weights", "own", "--data-dir", str(data), "--techniques", "eager",
                    "--devices", "cpu", "--profile", "smoke", "--time-budget", "0.2", "--record-accuracy-only",
                    cwd=tmp_path, cache=tmp_path / "cache")  # fmt: skip
    assert out.returncode == pytest.ExitCode.TESTS_FAILED, out.stdout[-3000:] + out.stderr[-3000:]
    frame = pd.read_csv(tmp_path / "results" / "latest" / "results.csv").set_index("case_id")
    assert frame["status"].to_dict() == {
        "own_image-eager-cpu-bs2": "passed",
        "own_text-eager-cpu-bs2": "passed",
        "five_way-eager-cpu-bs2": "failed",
        "no_weights-eager-cpu-bs2": "skipped",
    }
    assert not (tmp_path / "cache" / "checkpoints").exists()  # nothing was trained

    # The same accuracy as the saved models give on the same data, computed here directly.
    image_labels = [label for label, colors in enumerate(COLORS.values()) for _ in colors]
    pixels = torch.tensor([c for colors in COLORS.values() for c in colors], dtype=torch.float32) / 255
    normalized = (pixels - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)
    images = normalized[:, :, None, None].expand(-1, -1, 8, 8)
    tokens = torch.tensor([(t + [0] * 6)[:6] for t, _ in SEQUENCES])
    image_row, text_row = frame.loc["own_image-eager-cpu-bs2"], frame.loc["own_text-eager-cpu-bs2"]
    assert image_row["eval_samples"] == 6 and text_row["eval_samples"] == 5
    assert image_row["top1"] == pytest.approx(direct_top1(image_model, images, image_labels))
    assert text_row["top1"] == pytest.approx(direct_top1(text_model, tokens, [k for _, k in SEQUENCES]))
    assert image_row["weights"] == "own"
    assert (
        image_row["accuracy_source"]
        == f"your data ({data}), own weights ({tmp_path / 'models' / 'own_image.pt'})"
    )
    assert text_row["accuracy_source"] == (
        f"your data ({data / 'eval.jsonl'}), own weights ({tmp_path / 'models' / 'own_text.pt'})"
    )
    # Other classes than the data's: one line, not an accuracy; no weights: a skipped case.
    assert (
        frame.loc["five_way-eager-cpu-bs2", "reason"]
        == f"five_way outputs 5 classes but {data} has 2 classes"
    )
    assert (
        f"five_way-eager-cpu-bs2: failed: five_way outputs 5 classes but {data} has 2 classes" in out.stdout
    )
    assert frame.loc["no_weights-eager-cpu-bs2", "reason"] == (
        "--weights own: no_weights's spec names no weights of its own (its weights=)"
    )

    # A file a spec names that is not there stops the run before it starts, in one line.
    (tmp_path / "models" / "own_text.pt").unlink()
    out = run_bench("bench/", "--weights", "own", "--collect-only", cwd=tmp_path, cache=tmp_path / "cache")
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert out.returncode == pytest.ExitCode.USAGE_ERROR and "Traceback" not in out.stderr
    assert lines == [
        f"ERROR: --weights own: own_text's weights file {tmp_path / 'models' / 'own_text.pt'} does not exist"
    ]
