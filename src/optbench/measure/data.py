"""Measures one data-pipeline case: an ImageFolder of JPEGs read through a DataLoader built with the
case's settings, alone (samples per second of the loader) and feeding a training step of the case's
model (samples per second of training, per-batch times in the row's latency columns)."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from optbench.catalog.devices import synchronize
from optbench.catalog.techniques import Stack
from optbench.catalog.techniques.data_loader import CORES, LoaderSettings
from optbench.matrix.case import BASELINE, Case
from optbench.matrix.profiles import TimingPolicy
from optbench.measure.inference import TimeFn
from optbench.measure.paired import PairedResult
from optbench.results.derive import latency_stats

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
WORKER_TIMEOUT_S = 120
"""A worker that delivers nothing for this long fails the row instead of hanging the run."""


@dataclass(frozen=True)
class PipelineConfig:
    """What every data case of a run reads."""

    images: int = 256
    """Images in the generated dataset (ignored with `data_dir`)."""
    crop: int = 128
    """Side of the training crop the pipeline produces."""
    data_dir: Path | None = None
    """A user's ImageFolder tree instead of the generated JPEGs."""
    cache_root: Path | None = None
    loader_epochs: int = 2
    """Epochs the loader alone is timed over (2: an epoch boundary, where workers restart)."""
    fed_epochs: int = 1
    """Epochs a case timed alone is fed over (an eager case, or any case under `optbench ab`)."""
    block_batches: int = 4
    """Paired cases: batches in each block's epoch (optbench.measure.data_paired; the profile's
    pipeline_block_batches). 4 lets two workers with the default prefetch run ahead of the step
    (4 batches in flight); fewer keep 10 pairs of them affordable in a short run."""

    def root(self) -> Path:
        from optbench.catalog.tasks.jpeg_folder import generated_dataset

        return self.data_dir or generated_dataset(self.images, self.cache_root)


class UnreadableImage(RuntimeError):
    """An image file that does not decode; the message starts with its path."""


def _pil_loader(path: str) -> Any:
    from PIL import Image

    try:
        with open(path, "rb") as f:
            image = Image.open(f)
            return image.convert("RGB")  # decodes now, so a corrupt file fails here
    except Exception as error:
        raise UnreadableImage(f"{path}: {type(error).__name__}: {error}") from None


def _tv_loader(path: str) -> Any:
    from torchvision.io import ImageReadMode, decode_image, read_file

    try:
        with warnings.catch_warnings():
            # torchvision 0.29 deprecates its decoders for TorchCodec, in a warning per image that
            # would bury the run's output; the row's api column says which decoder ran.
            warnings.simplefilter("ignore", DeprecationWarning)
            return decode_image(read_file(path), mode=ImageReadMode.RGB)  # decode_jpeg for JPEGs
    except Exception as error:
        raise UnreadableImage(f"{path}: {type(error).__name__}: {error}") from None


def transform(settings: LoaderSettings, crop: int) -> Any:
    from torchvision.transforms import v2

    shape = (
        [v2.RandomResizedCrop(crop, antialias=True), v2.RandomHorizontalFlip()]
        if settings.augment
        else [v2.Resize(crop, antialias=True), v2.CenterCrop(crop)]
    )
    return v2.Compose([*shape, v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


def open_dataset(root: Path, settings: LoaderSettings, crop: int) -> torch.utils.data.Dataset:
    from torchvision.datasets import ImageFolder

    loader = _pil_loader if settings.decoder == "pil" else _tv_loader
    return ImageFolder(str(root), transform=transform(settings, crop), loader=loader)


def pins(settings: LoaderSettings) -> bool:
    """Whether pin_memory takes effect: DataLoader pins only when CUDA is there."""
    return settings.pin_memory and torch.cuda.is_available()


def make_loader(
    dataset: torch.utils.data.Dataset, settings: LoaderSettings, batch_size: int, drop_last: bool = False
) -> torch.utils.data.DataLoader:
    workers = settings.num_workers
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=settings.shuffle,
        num_workers=workers,
        pin_memory=settings.pin_memory,
        persistent_workers=settings.persistent_workers if workers else False,
        prefetch_factor=settings.prefetch_factor if workers else None,
        drop_last=drop_last,
        timeout=WORKER_TIMEOUT_S if workers else 0,
        generator=torch.Generator().manual_seed(0),
    )


def settings_for(case: Case) -> LoaderSettings:
    """The baseline loader with each of the case's data techniques applied in order."""
    tech = case.tech
    settings = LoaderSettings()
    for part in tech.parts if isinstance(tech, Stack) else (tech,):
        configure = getattr(part, "configure", None)
        if configure is not None:
            settings = configure(settings)
    return settings


def epochs(loader: torch.utils.data.DataLoader, count: int) -> Iterator[Any]:
    """The batches of `count` epochs of `loader`, each epoch's iterator started when it is reached."""
    for _ in range(count):
        with warnings.catch_warnings():
            # Without CUDA, pin_memory=True warns on every epoch; the row's pin_memory_effective says so.
            warnings.filterwarnings("ignore", message="'pin_memory' argument is set as true")
            batches = iter(loader)
        yield from batches


def worker_error(error: BaseException) -> str:
    """One line for an error raised in a worker: DataLoader re-raises it with the worker's whole
    traceback in its message, whose last line is the original error (naming the file)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if len(lines) > 1 and "Original Traceback" in str(error):
        return f"{lines[-1]} (in a DataLoader worker)"
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


class PipelineFailed(RuntimeError):
    """The loader failed: a corrupt image, a worker that died or hung. Message: one line."""


@dataclass
class PipelineMeasurement:
    columns: dict[str, Any] = field(default_factory=dict)
    paired: PairedResult | None = None
    """The case timed against its group's eager loader (None: timed alone)."""


Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
_CONSUMER: dict[tuple[str, str, int, int, int], Step] = {}
"""The last consumer built: the settings of one model and batch share it (its weights only move)."""


def _consumer(case: Case, device: torch.device, crop: int, classes: int) -> Step:
    """A training step of the case's model, fp32 eager, seeded weights, warmed up at the batch's
    shape, so the model's own first-call costs are not the pipeline's. Built for the crop (a ViT's
    position embeddings fix its input size) and the dataset's number of classes."""
    key = (case.model, case.device, case.batch_size, crop, classes)
    if key in _CONSUMER:
        return _CONSUMER[key]
    _CONSUMER.clear()
    from optbench.catalog.techniques import Prepared
    from optbench.measure.train_step import train_step

    torch.manual_seed(0)
    spec = replace(case.spec, num_classes=classes, resolution=crop)
    model = spec.build_model().to(device)
    step = train_step(Prepared.eager(model, ()), device, lr=spec.recipe.lr)

    def run(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = step((x,), y)
        synchronize(device)
        return loss

    warm = torch.randn(case.batch_size, 3, crop, crop, device=device)
    for _ in range(2):
        run(warm, torch.zeros(case.batch_size, dtype=torch.long, device=device))
    _CONSUMER[key] = run
    return run


def measure_pipeline(
    case: Case,
    config: PipelineConfig,
    time_fn: TimeFn,
    policy: TimingPolicy,
    eager: dict[Any, Any] | None = None,
) -> PipelineMeasurement:
    """Measure one data case. With `eager` (the run's store of its group's eager side, None when cases
    are timed alone), an eager case leaves its loader there and any other case is timed in ABBA
    blocks against it (optbench.measure.data_paired); otherwise the case is fed one epoch alone."""
    from optbench.measure import data_paired  # it builds on this module's loaders

    settings = settings_for(case)
    device = torch.device(case.device)
    if eager is not None and case.technique == BASELINE:
        eager.clear()  # the previous group's eager side: freed before this group's is built
    root = config.root()
    dataset = open_dataset(root, settings, config.crop)
    if len(dataset) < case.batch_size:
        raise PipelineFailed(f"{root} has {len(dataset)} images, fewer than one batch of {case.batch_size}")
    pin = pins(settings)
    columns: dict[str, Any] = {
        **asdict(settings),
        "input_shape": f"3x{config.crop}x{config.crop}",
        "resolution": config.crop,
        "seq_len": None,
        "dtype": "float32",
        "api": case.tech.api,
        "dataset_images": len(dataset),
        "dataset_dir": str(root),
        "workers_over_cores": settings.num_workers > CORES,
        "pin_memory_effective": pin if settings.pin_memory else None,
    }
    against = eager.get(case.group) if eager is not None and case.technique != BASELINE else None
    paired = None
    try:
        loader = make_loader(dataset, settings, case.batch_size)
        started = time.perf_counter()
        seen = sum(len(y) for _, y in epochs(loader, config.loader_epochs))
        columns["loader_samples_per_s"] = seen / (time.perf_counter() - started)
        del loader

        classes = len(getattr(dataset, "classes", ())) or case.spec.num_classes
        step = _consumer(case, device, config.crop, classes)
        indices = data_paired.block_indices(len(dataset), case.batch_size, config.block_batches)

        def feeder() -> data_paired.Feeder:  # a side of the pairs, this case's loader on the block subset
            return data_paired.Feeder(dataset, settings, case.batch_size, indices, step, device)

        if against is not None:
            mine = feeder()
            paired = data_paired.time_against_eager(mine, against, policy)
            samples = mine.batch_s
            del mine  # its loader, and persistent workers with it, before the row is written
            record = getattr(time_fn, "record", None)
            if record is not None:  # pytest-benchmark's stats see the case's batches
                record(samples)
        else:
            samples = _fed_alone(case, dataset, settings, config, step, device, time_fn)
            if eager is not None and case.technique == BASELINE:  # kept for the group's cases
                eager[case.group] = feeder()
    except PipelineFailed:
        raise
    except Exception as error:  # one line naming the file or the worker, not the worker's traceback
        raise PipelineFailed(worker_error(error)) from None
    total = sum(samples)
    columns.update(
        {
            **latency_stats(samples, policy),
            # End to end, stalls included: the mean batch, not the median, is what an epoch costs.
            "throughput": case.batch_size * len(samples) / total,
            "samples_ms": [s * 1e3 for s in samples],
            "prepare_s": None,
        }
    )
    return PipelineMeasurement(columns, paired)


def _fed_alone(
    case: Case,
    dataset: torch.utils.data.Dataset,
    settings: LoaderSettings,
    config: PipelineConfig,
    step: Step,
    device: torch.device,
    time_fn: TimeFn,
) -> list[float]:
    """Seconds per batch of the whole dataset's epochs feeding `step`, the case timed alone."""
    pin = pins(settings)
    loader = make_loader(dataset, settings, case.batch_size, drop_last=True)
    batches = epochs(loader, config.fed_epochs)

    def call() -> object:
        x, y = next(batches)
        return step(x.to(device, non_blocking=pin), y.to(device, non_blocking=pin))

    rounds = len(loader) * config.fed_epochs
    # Exactly the epochs' batches, unpaced: the iterator ends with them, and workers would keep
    # prefetching through a pause.
    samples = time_fn(call, rounds, 0, paced=False)
    batches.close()  # ends the loader's iterator: its workers shut down now
    return samples
