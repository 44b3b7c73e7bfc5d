"""The default embedded image task: independent of its train split, big enough, and not saturated."""

import torch
from torch import nn

from optbench.catalog.models import TrainRecipe, image_classifier
from optbench.catalog.tasks import task_for
from optbench.catalog.tasks.hard_digits import EPOCHS, hard_digits_task


def test_held_out_is_large_disjoint_and_fixed():
    task = hard_digits_task(16)
    assert len(task.eval_y) >= 2000  # a 1-point change must be resolvable by the paired interval
    assert task.train_x.shape[1:] == (3, 16, 16) and task.eval_x.shape[1:] == (3, 16, 16)
    assert task.eval_x.min() >= -1 and task.eval_x.max() <= 1
    # Every class is held out in about equal measure (the digits are split stratified).
    counts = torch.bincount(task.eval_y, minlength=10)
    assert counts.min() >= 0.8 * counts.float().mean()
    # No held-out view is a training view: views are distorted independently, so none repeats.
    train_rows = {hash(row.numpy().tobytes()) for row in task.train_x.flatten(1)}
    assert not any(hash(row.numpy().tobytes()) in train_rows for row in task.eval_x.flatten(1))
    assert hard_digits_task.__wrapped__(16).fingerprint == task.fingerprint  # same data every time
    assert task.epochs == EPOCHS


def test_the_profiles_choose_their_image_task():
    from optbench.matrix.profiles import get_profile

    spec = image_classifier("x", lambda num_classes: nn.Linear(1, num_classes), resolution=8)
    assert task_for(spec, image_task=get_profile("default").image_task).name.startswith("hard-digits")
    assert task_for(spec, image_task=get_profile("smoke").image_task).name.startswith("digits")


def _small_cnn(num_classes: int) -> nn.Module:
    def block(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]

    return nn.Sequential(
        *block(3, 32),
        nn.MaxPool2d(2),
        *block(32, 64),
        nn.MaxPool2d(2),
        *block(64, 64),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, num_classes),
    )


def test_the_task_is_not_saturated():
    """A small CNN trained as the zoo is (the task's epochs, no early stop) learns it, far from 1."""
    from optbench.catalog.checkpoint_training import train

    spec = image_classifier(
        "small_cnn", _small_cnn, resolution=16, recipe=TrainRecipe(target_top1=0.5, lr=3e-3)
    )
    model, result = train(spec, hard_digits_task(16), progress=False)
    assert result.epochs == EPOCHS  # the task sets the length: the recipe's 0.5 target stops nothing
    assert result.target_top1 is None and result.reached_target
    assert 0.3 < result.top1 < 0.95  # learned something (chance is 0.1), and not saturated


def test_a_recipe_can_train_longer_than_the_task_sets_and_its_checkpoint_key_says_so():
    """TrainRecipe.task_epochs (MobileNetV3 trains 10 epochs of the hard digits, the small ViT 16)."""
    from dataclasses import replace

    from optbench.catalog.checkpoint_training import train
    from optbench.catalog.checkpoints import checkpoint_key

    task = replace(hard_digits_task(16), epochs=1)
    tiny = lambda num_classes: nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, num_classes))  # noqa: E731
    spec = image_classifier("tiny", tiny, resolution=16, recipe=TrainRecipe(lr=3e-3, task_epochs=2))
    _, result = train(spec, task, progress=False)
    assert result.epochs == 2 and result.target_top1 is None
    plain = image_classifier("tiny", tiny, resolution=16, recipe=TrainRecipe(lr=3e-3))
    assert train(plain, task, progress=False)[1].epochs == 1  # without it, the task's length
    assert checkpoint_key(spec, task, 0) != checkpoint_key(plain, task, 0)


def test_a_recipe_with_fresh_views_trains_each_later_epoch_on_new_views_of_the_same_samples():
    """TrainRecipe.fresh_views (the small ViT): epoch 1 on the stored views, epoch k on the task's
    (k-1)-th new set, drawn seeded; a recipe without it, or a task that cannot draw, keeps the stored."""
    from dataclasses import replace

    from optbench.catalog.checkpoint_training import train
    from optbench.catalog.checkpoints import checkpoint_key

    task = hard_digits_task(16)
    fresh = task.train_views(1)
    assert fresh.shape == task.train_x.shape and fresh.min() >= -1 and fresh.max() <= 1
    assert not torch.equal(fresh, task.train_x) and not torch.equal(fresh, task.train_views(2))
    assert torch.equal(fresh, task.train_views(1))  # seeded: the same views every time
    seen, drawn = [], []

    def views(k: int) -> torch.Tensor:
        drawn.append(k)
        return task.train_views(k)

    class Spy(nn.Module):
        def __init__(self, num_classes: int) -> None:
            super().__init__()
            self.linear = nn.Linear(3 * 16 * 16, num_classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.training:
                seen.append(x[:1].clone())
            return self.linear(x.flatten(1))

    short = replace(task, epochs=3, train_views=views)
    recipe = TrainRecipe(lr=3e-3, fresh_views=True)
    spec = image_classifier("spy", Spy, resolution=16, recipe=recipe)
    train(spec, short, progress=False)
    assert drawn == [1, 2]
    steps = -(-len(task.train_y) // recipe.batch_size)
    firsts = [seen[i * steps] for i in range(3)]  # each epoch's first sample, in its shuffled order
    order = torch.randperm(len(task.train_y), generator=torch.Generator().manual_seed(0))
    assert torch.equal(firsts[0][0], task.train_x[order[0]])
    assert not any(
        torch.equal(first[0], task.train_x[i]) for first in firsts[1:] for i in range(len(task.train_x))
    )
    # Without the flag, or on a task that cannot draw views, every epoch is the stored views.
    drawn.clear()
    plain = image_classifier("spy", Spy, resolution=16, recipe=TrainRecipe(lr=3e-3))
    train(plain, short, progress=False)
    train(spec, replace(short, train_views=None), progress=False)
    assert drawn == []
    assert checkpoint_key(spec, short, 0) != checkpoint_key(plain, short, 0)


def test_the_fresh_views_seed_is_part_of_the_checkpoint_key(monkeypatch):
    """A checkpoint trained on other fresh views is not read back: their seed is in the task's name,
    hence in its fingerprint and the checkpoint key."""
    from optbench.catalog.checkpoints import checkpoint_key
    from optbench.catalog.tasks import hard_digits

    spec = image_classifier("x", lambda num_classes: nn.Linear(1, num_classes), resolution=8)
    before = hard_digits.hard_digits_task.__wrapped__(8)
    monkeypatch.setattr(hard_digits, "FRESH_SEED", hard_digits.FRESH_SEED + 1)
    after = hard_digits.hard_digits_task.__wrapped__(8)
    assert torch.equal(after.train_x, before.train_x)  # the stored views are the same ...
    assert not torch.equal(after.train_views(1), before.train_views(1))  # ... the fresh ones are not
    assert checkpoint_key(spec, after, 0) != checkpoint_key(spec, before, 0)


def test_every_profile_names_an_embedded_image_task_and_the_default_is_catalogs():
    from optbench.catalog.tasks.base import DEFAULT_IMAGE_TASK, IMAGE_TASKS
    from optbench.matrix.profiles import PROFILES, Profile

    # the matrix layer cannot import the catalog's torch-importing task module for its default
    assert Profile.image_task == DEFAULT_IMAGE_TASK
    assert {p.image_task for p in PROFILES.values()} <= set(IMAGE_TASKS)
