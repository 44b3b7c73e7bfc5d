"""`optbench train`: train (or load from the cache) models' checkpoints and print how it went."""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    from optbench.catalog.tasks.base import DEFAULT_IMAGE_TASK, IMAGE_TASKS

    parser = argparse.ArgumentParser(prog="optbench train", description=__doc__)
    parser.add_argument(
        "--models",
        default=None,
        help="comma-separated models, wildcards or tags (default: the models in ./models, or every zoo "
        "model in optbench's own repository)",
    )
    parser.add_argument(
        "--models-dir", action="append", default=[], help="another folder of model files (repeatable)"
    )
    parser.add_argument("--data-dir", default=None, help="ImageFolder data for image models (see README)")
    parser.add_argument(
        "--image-task",
        default=DEFAULT_IMAGE_TASK,
        choices=IMAGE_TASKS,
        help="embedded task for image models without --data-dir: hard_digits (what the default and full "
        "profiles use) or digits (the smoke profile's)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)

    from optbench.catalog.models import (
        MODELS,
        is_zoo_model,
        load_entry_points,
        load_user_dir,
        load_zoo,
        zoo_dir,
    )
    from optbench.catalog.weights import WeightsProvider
    from optbench.errors import UsageProblem

    load_zoo()
    load_entry_points()
    here = Path.cwd() / "models"
    for directory in [here, *map(Path, args.models_dir)]:
        if directory.is_dir():
            load_user_dir(directory)
        elif directory != here:
            raise UsageProblem(f"--models-dir {str(directory)!r} is not a folder")
    if args.models:
        patterns = [n.strip() for n in args.models.split(",") if n.strip()]
        names = MODELS.expand(patterns, lambda spec: spec.tags)
    else:
        in_repository = here.resolve() == zoo_dir()
        names = [n for n in MODELS.names() if in_repository or not is_zoo_model(n)]
        if not names:
            raise UsageProblem(f"no models of your own in {here}; name zoo models with --models")
    data_dir = Path(args.data_dir) if args.data_dir else None
    provider = WeightsProvider(
        "trained", data_dir=data_dir, progress=not args.quiet, image_task=args.image_task
    )
    total = time.perf_counter()
    print(
        f"{'model':20s} {'trained at':>10s} {'cache':>5s} {'seconds':>8s} {'epochs':>6s} {'top1':>6s} {'target':>6s}"
    )
    for name in names:
        started = time.perf_counter()
        weights = provider.get(MODELS.get(name))
        seconds = time.perf_counter() - started
        rec = weights.record
        print(
            f"{name:20s} {weights.made_at:>10s} {rec['cache']:>5s} {seconds:8.1f} {rec['epochs']:6d} "
            f"{rec['top1']:6.3f} {weights.spec.recipe.target_top1:6.2f}"
            + ("" if rec["reached_target"] else "  (target not reached)"),
            flush=True,
        )
    print(f"total {time.perf_counter() - total:.1f} s")
    return 0
