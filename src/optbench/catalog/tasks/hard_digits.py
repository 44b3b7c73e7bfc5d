"""The default image task: scikit-learn's handwritten digits, distorted until they are hard.

The plain digits task is saturated (the zoo reaches 0.97 top-1, so almost any compression looks
free). Here each view of a digit gets its own random affine distortion, contrast, background
gradient, occluding patch and pixel noise, so part of the views are ambiguous and the zoo's top-1
stays well below 1: those borderline views are the ones a damaging compression flips.

The digits are split in half before any view is made, so no held-out view shares its digit with a
training view. Held-out: 3 views of each of 899 digits = 2,697 samples, enough to resolve a 1-point
change. The paired accuracy interval treats views as independent; views of one digit share its
handwriting, which the docs state (docs/accuracy.md).
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.nn.functional as F

from optbench.catalog.tasks.base import TaskData

HELD_OUT = 0.5
TRAIN_VIEWS = 6
EVAL_VIEWS = 3
ROTATE_DEG = 20.0
NOISE = 0.3
"""Standard deviation of the pixel noise, on the [-1, 1] pixel scale: the main difficulty knob."""
FRESH_SEED = 1000
"""Seed of the k-th set of fresh training views: FRESH_SEED + k (TaskData.train_views)."""
EPOCHS = 4
"""Epochs each zoo model trains on this task (no early stop at a target top-1)."""


def distort(images: torch.Tensor, views: int, resolution: int, seed: int) -> torch.Tensor:
    """`views` randomly distorted copies of each (n, 8, 8) image in [0, 1], as (n * views, 3, r, r)
    in [-1, 1], seeded."""
    gen = torch.Generator().manual_seed(seed)
    x = images.repeat_interleave(views, 0).unsqueeze(1)
    n = len(x)
    x = F.interpolate(x, size=(resolution, resolution), mode="bilinear", align_corners=False)

    def uniform(lo: float, hi: float, *shape: int) -> torch.Tensor:
        return lo + (hi - lo) * torch.rand(*shape, generator=gen)

    angle = uniform(-ROTATE_DEG, ROTATE_DEG, n) * math.pi / 180
    scale = uniform(0.85, 1.1, n)
    shear = uniform(-0.15, 0.15, n)
    tx, ty = uniform(-0.12, 0.12, 2, n)
    cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
    theta = torch.stack(
        [torch.stack([cos, -sin + shear, tx], 1), torch.stack([sin, cos, ty], 1)], 1
    )  # (n, 2, 3): where each output pixel samples the input
    grid = F.affine_grid(theta, [n, 1, resolution, resolution], align_corners=False)
    x = F.grid_sample(x, grid, align_corners=False, padding_mode="zeros")

    # Colour: ink and paper in random colours, at a random contrast.
    paper = uniform(-0.6, 0.6, n, 3, 1, 1)
    contrast = uniform(0.8, 1.6, n, 1, 1, 1) * torch.sign(uniform(-1, 1, n, 1, 1, 1))
    ink = torch.clamp(paper + contrast * uniform(0.5, 1.0, n, 3, 1, 1), -1, 1)
    out = paper + (ink - paper) * x  # x in [0, 1]: 0 paper, 1 ink

    # A linear background gradient, then an occluding patch of noise, then pixel noise.
    ramp = torch.linspace(-1, 1, resolution)
    gx, gy = uniform(-0.4, 0.4, 2, n, 3, 1, 1)
    out = out + gx * ramp.view(1, 1, 1, -1) + gy * ramp.view(1, 1, -1, 1)
    side = torch.randint(resolution // 8, resolution // 4 + 1, (n,), generator=gen)
    ox = (torch.rand(n, generator=gen) * (resolution - side)).long()
    oy = (torch.rand(n, generator=gen) * (resolution - side)).long()
    cols = torch.arange(resolution)
    in_x = (cols[None] >= ox[:, None]) & (cols[None] < (ox + side)[:, None])
    in_y = (cols[None] >= oy[:, None]) & (cols[None] < (oy + side)[:, None])
    patch = (in_y[:, :, None] & in_x[:, None, :]).unsqueeze(1)
    out = torch.where(patch, uniform(-1, 1, n, 3, 1, 1), out)
    out = out + NOISE * torch.randn(out.shape, generator=gen)
    return out.clamp(-1, 1).contiguous()


@lru_cache(maxsize=4)
def hard_digits_task(resolution: int) -> TaskData:
    from optbench.catalog.tasks.digits import SPLIT_SEED, split_digits

    images, labels, train_idx, eval_idx = split_digits(HELD_OUT)

    def views(idx: torch.Tensor, n: int, seed: int) -> torch.Tensor:
        return distort(images[idx], n, resolution, seed=seed)

    # Seeds: 1 the stored training views, 2 the held-out ones, FRESH_SEED + k the k-th fresh set
    # (bound here and in the name, so a change of it is a change of the checkpoint key).
    fresh = FRESH_SEED
    return TaskData(
        name=f"hard-digits-{resolution}px-seed{SPLIT_SEED}-v{TRAIN_VIEWS}x{EVAL_VIEWS}-n{NOISE}-f{fresh}",
        train_x=views(train_idx, TRAIN_VIEWS, seed=1),
        train_y=labels[train_idx].repeat_interleave(TRAIN_VIEWS),
        eval_x=views(eval_idx, EVAL_VIEWS, seed=2),
        eval_y=labels[eval_idx].repeat_interleave(EVAL_VIEWS),
        num_classes=10,
        epochs=EPOCHS,
        train_views=lambda k: views(train_idx, TRAIN_VIEWS, seed=fresh + k),
    )
