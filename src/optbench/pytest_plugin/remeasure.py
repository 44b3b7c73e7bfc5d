"""A second look before the gate fails a run: the cases whose latency regressed are measured again,
in the same process, with fresh eager baselines, into `<run>/confirm/`, within a time budget.

A one-off hiccup of a shared machine then does not fail a merge; a real regression shows twice."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from optbench.pytest_plugin.runner import CaseFailed, CaseRunner, RunState
from optbench.results import ResultsWriter

CONFIRM_DIR = "confirm"


def remeasure(
    run: RunState, cases: dict[str, tuple[Any, str]], order: list[str], run_dir: Path, budget_s: float
) -> tuple[Path, set[str]]:
    """Measure the cases named in `order` again (case id -> (Case, test name) in `cases`), until
    `budget_s` is spent; returns the folder of their rows and the ids that were measured."""
    folder = run_dir / CONFIRM_DIR
    writer = ResultsWriter(folder)
    # Same weights, references and timing policy; new rows, and eager baselines measured anew, so
    # each ratio compares two cases measured together now.
    again = dataclasses.replace(run, writer=writer, rows=[], baselines={}, reference_attempts=set())
    measured: set[str] = set()
    started = time.perf_counter()
    try:
        for case_id in order:
            if case_id not in cases or time.perf_counter() - started > budget_s:
                continue
            case, test = cases[case_id]
            try:
                CaseRunner(again).run(case, test=test)
            except CaseFailed:
                continue  # recorded as a row, but a second look that failed measured nothing
            measured.add(case_id)
    finally:
        writer.close()
    return folder, measured
