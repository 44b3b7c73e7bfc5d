"""What the `optbench` command's modules share: the exit codes and writing an output file. No torch."""

from __future__ import annotations

from pathlib import Path

from optbench.errors import UsageProblem

EXIT_OK = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2


def write_output(path: str | None, text: str) -> None:
    """Write `text` to `path` when one was given; an unwritable path is bad input (UsageProblem)."""
    if path:
        try:
            Path(path).write_text(text, encoding="utf-8")
        except OSError as error:
            raise UsageProblem(f"could not write {path}: {error.strerror}") from None
