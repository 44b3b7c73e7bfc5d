import pytest
import torch

from optbench.catalog.checkpoints import checkpoint_path, load_or_train
from optbench.catalog.tasks.digits import digits_task


@pytest.fixture
def spec(registries):
    return registries[0].get("tiny_mlp").at_task_shape()


def _trainer(spec, calls):
    def train_fn():
        calls.append(1)
        torch.manual_seed(len(calls))
        return spec.build_model(), {"top1": 0.5, "epochs": 1, "seconds": 0.1, "reached_target": False}

    return train_fn


def test_cache_hit_returns_bit_identical_weights(spec, tmp_path):
    task = digits_task(spec.task_resolution)
    calls = []
    first, meta = load_or_train(spec, task, 0, _trainer(spec, calls), root=tmp_path)
    assert meta["cache"] == "miss" and calls == [1]
    second, meta2 = load_or_train(spec, task, 0, _trainer(spec, calls), root=tmp_path)
    assert meta2["cache"] == "hit" and calls == [1]
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    assert meta2["top1"] == 0.5


def test_key_changes_with_data_and_seed(spec, tmp_path):
    a = checkpoint_path(spec, digits_task(8), 0, tmp_path)
    assert a != checkpoint_path(spec, digits_task(8), 1, tmp_path)
    assert a != checkpoint_path(spec, digits_task(16), 0, tmp_path)
    assert a.parent == tmp_path / "checkpoints" and a.name.startswith("tiny_mlp-")


def test_truncated_checkpoint_warns_and_retrains(spec, tmp_path):
    task = digits_task(spec.task_resolution)
    calls = []
    load_or_train(spec, task, 0, _trainer(spec, calls), root=tmp_path)
    path = checkpoint_path(spec, task, 0, tmp_path)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.warns(UserWarning, match="unusable.*retraining"):
        _, meta = load_or_train(spec, task, 0, _trainer(spec, calls), root=tmp_path)
    assert meta["cache"] == "miss" and calls == [1, 1]
    _, meta = load_or_train(spec, task, 0, _trainer(spec, calls), root=tmp_path)
    assert meta["cache"] == "hit"


def test_checkpoint_that_does_not_fit_the_model_warns_and_retrains(spec, tmp_path):
    from optbench.catalog.checkpoints import atomic_save

    task = digits_task(spec.task_resolution)
    calls = []
    path = checkpoint_path(spec, task, 0, tmp_path)
    other = torch.nn.Linear(3, 4).state_dict()  # readable, but another model's weights
    atomic_save({"state_dict": other, "meta": {"top1": 1.0}}, path)
    with pytest.warns(
        UserWarning, match=r"unusable \(RuntimeError: Error\(s\) in loading state_dict.*retraining"
    ):
        state, meta = load_or_train(spec, task, 0, _trainer(spec, calls), root=tmp_path)
    assert meta["cache"] == "miss" and calls == [1] and set(state) == set(spec.build_model().state_dict())
    assert path.with_suffix(".unusable").exists()  # the unusable file is kept, not overwritten


def test_training_progress_in_a_log_is_sparse(spec, capsys):
    # capsys's stderr is not a terminal, as in CI: the bar is redrawn once per epoch (with its held-out
    # top-1) and at most every 10 s otherwise, never once per step.
    import time

    from optbench.catalog.checkpoint_training import train

    task = digits_task(spec.resolution)
    started = time.perf_counter()
    _, result = train(spec, task, progress=True)
    seconds = time.perf_counter() - started
    log = capsys.readouterr().err
    steps = result.epochs * -(-len(task.train_y) // spec.recipe.batch_size)
    assert "training tiny_mlp" in log and steps > 20
    assert log.count("\r") <= 3 + result.epochs + seconds / 10, (log.count("\r"), steps)
