"""The options' checks that need more than a range or a list of choices (optbench.matrix.settings
declares which option has which). No pytest and no torch at import: those that need the catalog
import it when they run."""

from __future__ import annotations

import re
from pathlib import Path

from optbench.errors import UnknownNameError, UsageProblem
from optbench.matrix.setting import split

DEVICES = ("cpu", "cuda", "mps")
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")  # "+" as in stack names


def parse_batch_sizes(value: str | None, flag: str = "--batch-sizes") -> list[int] | None:
    items = split(value)
    if items is None:
        return None
    try:
        sizes = [int(v) for v in items]
    except ValueError:
        sizes = []
    if not sizes or any(s < 1 for s in sizes):
        raise UnknownNameError(f"{flag} takes positive whole numbers separated by commas, got {value!r}")
    return sizes


def check_batch_sizes(flag: str, value: str) -> None:
    parse_batch_sizes(value, flag)


def check_weights(flag: str, value: str) -> None:
    from optbench.catalog.weights import WEIGHT_CHOICES

    if value not in WEIGHT_CHOICES:
        raise UnknownNameError(f"unknown weights {value!r}; valid weights: {', '.join(WEIGHT_CHOICES)}")


def check_timing_shape(flag: str, value: str) -> None:
    from optbench.catalog.models import check_shape

    check_shape(value)


def check_data_folder(flag: str, value: str) -> None:
    from optbench.catalog.tasks.data_dir import check_data_dir

    check_data_dir(Path(value))


def check_jpeg_folder(flag: str, value: str) -> None:
    from optbench.catalog.tasks.jpeg_folder import check_image_folder

    check_image_folder(Path(value), flag)


def check_folders(flag: str, value: list[str]) -> None:
    for directory in value:
        if not Path(directory).is_dir():
            raise UnknownNameError(f"{flag} {directory!r} is not a folder")


NAME_MAX = 200
"""Longest run id or baseline name: it names a folder, and file systems allow 255 bytes a name."""


def check_run_id(flag: str, value: str) -> None:
    if len(value.encode()) > NAME_MAX:
        raise UsageProblem(
            f"{flag} is {len(value.encode())} bytes long; it names a folder: at most {NAME_MAX}"
        )
    if not RUN_ID.fullmatch(value) or value in (".", ".."):
        raise UsageProblem(
            f"{flag} {value!r} may hold only letters, digits, '.', '_', '+' and '-' (it names a folder "
            "in <results>/runs)"
        )


def check_malloc(flag: str, value: str) -> None:
    """`fixed` needs glibc's own malloc (the choice itself is checked against the option's choices)."""
    if value == "fixed":
        from optbench.catalog.allocator import unavailable

        reason = unavailable()
        if reason:
            raise UsageProblem(f"{flag} fixed cannot be applied here: {reason}")


def check_shard(flag: str, value: str) -> None:
    from optbench.matrix.shard import parse_shard

    parse_shard(value, flag)


def check_earlier_run(flag: str, value: str) -> None:
    from optbench.results import resolve

    try:
        resolve(value)
    except FileNotFoundError as error:
        raise UsageProblem(f"{flag}: {error}") from None
