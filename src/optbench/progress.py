"""Progress bars that suit where they are shown: live on a terminal, sparse in a CI log."""

from __future__ import annotations

import sys
from typing import Any

NON_INTERACTIVE_INTERVAL_S = 10.0
"""In a log nobody watches live (CI), a bar is redrawn at most this often: one default run's training
wrote about 217 KB of carriage-return updates before."""


def progress_bar(total: int | None, desc: str, enabled: bool = True, **kwargs: Any) -> Any:
    """A tqdm bar on stderr; redrawn at most every 10 s when stderr is not a terminal."""
    from tqdm import tqdm

    interactive = sys.stderr.isatty()
    return tqdm(
        total=total,
        desc=desc,
        disable=not enabled,
        file=sys.stderr,
        mininterval=0.1 if interactive else NON_INTERACTIVE_INTERVAL_S,
        maxinterval=10 if interactive else 10 * NON_INTERACTIVE_INTERVAL_S,
        **kwargs,
    )
