"""How a row reads in one cell of a table, for every table a report prints (the run's summary, the
report's grid, the claims): a case without a number to show reads as its short status, a speedup
with its 95% interval. No torch."""

from __future__ import annotations

import pandas as pd

from optbench.results.schema import Status
from optbench.results.values import number

SHORT_STATUS = {Status.SKIPPED: "skip", Status.FAILED: "FAILED", Status.OOM: "OOM", Status.NAN_OUTPUT: "NaN"}
"""How a case that did not pass reads in place of its numbers; other statuses read as themselves."""
ACCURACY_FLAGS = {
    Status.FAIL_ACCURACY: " FAIL",
    Status.NAN_OUTPUT: " NaN",
    Status.NONDETERMINISTIC_BASELINE: " NONDET",
    Status.DIVERGED: " DIVERGED",
}
"""What follows a held-out top-1 whose case's status is about its accuracy."""


def cell(row: pd.Series, text: str | None, otherwise: str | None = None) -> str:
    """`text`, or, when the row has none (None), its short status (SHORT_STATUS); a status without
    a short form reads as `otherwise`, or as itself when that is None."""
    if text is not None:
        return text
    status = str(row.get("status"))
    return SHORT_STATUS.get(status, status if otherwise is None else otherwise)


def speedup_text(row: pd.Series, missing: str = "-") -> str:
    """'1.85x [1.80, 1.90]': the speedup vs eager fp32 with its 95% interval (eager itself, or a row
    without an interval: the speedup alone); `missing` when the row has no speedup."""
    speedup = number(row.get("speedup"))
    if speedup is None:
        return missing
    low, high = number(row.get("speedup_ci95_low")), number(row.get("speedup_ci95_high"))
    if row.get("technique") == "eager" or low is None or high is None:
        return f"{speedup:.2f}x"
    return f"{speedup:.2f}x [{low:.2f}, {high:.2f}]"
