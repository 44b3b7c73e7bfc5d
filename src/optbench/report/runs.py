"""The runs a report reads: each run folder's rows and, where there is one, its manifest."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from optbench.errors import UsageProblem
from optbench.results import load, refuse_impossible, resolve
from optbench.results.manifest import Manifest, manifest_near


@dataclass
class Run:
    label: str
    """Short name in tables: the run folder's name (made unique)."""
    folder: Path
    rows: pd.DataFrame
    manifest: Manifest | None
    """Its run.json, None when it has none or none optbench can read."""


def read_runs(paths: list[str]) -> list[Run]:
    """Each path (a run folder, results/latest or a results file) as a Run; a path with no rows is a
    UsageProblem naming it."""
    runs: list[Run] = []
    seen: set[str] = set()
    for path in paths:
        file = resolve(path)
        rows = refuse_impossible(load(file), file)
        if rows.empty:
            raise UsageProblem(f"{file} has no rows: nothing to report")
        folder = file.parent
        label = Path(path).name if Path(path).is_dir() else folder.name
        if Path(path).is_symlink():
            label = f"{label} ({Path(path).resolve().name})"
        base, n = label, 2
        while label in seen:
            label, n = f"{base}#{n}", n + 1
        seen.add(label)
        runs.append(Run(label, folder, rows, manifest_near(file)))
    return runs
