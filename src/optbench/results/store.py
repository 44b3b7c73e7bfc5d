"""Run folders on disk: rows appended to results.csv and results.jsonl as the run goes, read back as a
typed pandas frame. Every column's type comes from the schema (optbench.results.schema). No torch."""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from optbench.results.manifest import refuse_newer_schema
from optbench.results.schema import COLUMN_NAMES, COLUMNS, DTYPES, JSON_ONLY, SCHEMA_VERSION, Status, typed

PREDICTIONS = "predictions.jsonl"


def load_predictions(run_dir: str | os.PathLike[str]) -> dict[str, tuple[list[int], list[int]]]:
    """case id -> (labels, top-1 predictions) of a run folder's predictions.jsonl ({} without one)."""
    found: dict[str, tuple[list[int], list[int]]] = {}
    path = Path(run_dir) / PREDICTIONS
    if not path.exists():
        return found
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            data = json.loads(line)
            found[data["case_id"]] = (data["labels"], data["predicted"])
    return found


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


class ResultsWriter:
    """Appends rows to results.csv and results.jsonl in a run folder, flushing after each row so an
    interrupted run keeps every finished case."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.run_dir / "results.csv"
        self.jsonl_path = self.run_dir / "results.jsonl"
        new = not self.csv_path.exists()
        if not new:  # appending (the same --run-id again): only to a table of the same columns
            with self.csv_path.open(encoding="utf-8", newline="") as existing:
                header = next(csv.reader(existing), [])
            if header and header != list(COLUMN_NAMES):
                from optbench.errors import UsageProblem

                raise UsageProblem(
                    f"{self.csv_path} has other columns (written by another optbench version): "
                    "rows cannot be added to it; use another --run-id"
                )
        self._csv_file = self.csv_path.open("a", newline="", encoding="utf-8")
        self._csv = csv.DictWriter(self._csv_file, fieldnames=COLUMN_NAMES, extrasaction="ignore")
        if new:
            self._csv.writeheader()
            self._csv_file.flush()
        self._jsonl_file = self.jsonl_path.open("a", encoding="utf-8")
        self._predictions: Any = None

    def append(self, row: Mapping[str, Any]) -> None:
        unknown = set(row) - set(COLUMN_NAMES) - set(JSON_ONLY)
        if unknown:
            raise KeyError(f"row has undocumented columns: {sorted(unknown)}")
        full = {name: typed(name, _clean(row.get(name))) for name in (*COLUMN_NAMES, *JSON_ONLY)}
        full["schema_version"] = SCHEMA_VERSION
        self._csv.writerow({k: ("" if v is None else v) for k, v in full.items()})
        self._csv_file.flush()
        self._jsonl_file.write(json.dumps(full) + "\n")
        self._jsonl_file.flush()

    def predictions(self, case_id: str, labels: list[int], predicted: list[int]) -> None:
        """A case's held-out labels and top-1 predictions, one JSON line per case in predictions.jsonl:
        enough for the report and the gate to recompute any paired accuracy interval."""
        if self._predictions is None:
            self._predictions = (self.run_dir / PREDICTIONS).open("a", encoding="utf-8")
        self._predictions.write(
            json.dumps({"case_id": case_id, "labels": labels, "predicted": predicted}) + "\n"
        )
        self._predictions.flush()

    def close(self) -> None:
        self._csv_file.close()
        self._jsonl_file.close()
        if self._predictions is not None:
            self._predictions.close()


def resolve(path: str | os.PathLike[str]) -> Path:
    """A run folder, `results/latest`, or a results.csv/.jsonl file -> the file to read."""
    p = Path(path)
    if p.is_dir():
        for name in ("results.jsonl", "results.csv"):
            if (p / name).exists():
                return p / name
        raise FileNotFoundError(f"no results.csv or results.jsonl in {p}")
    if not p.exists():
        raise FileNotFoundError(f"no such results file or folder: {p}")
    return p


def _read(file: Path) -> pd.DataFrame:
    """The rows of one results file; a file that is empty, truncated, corrupt or not optbench's is a
    UsageProblem naming it (one line), never a parser traceback."""
    from optbench.errors import UsageProblem

    try:
        size = file.stat().st_size
        if file.is_dir():
            raise IsADirectoryError(21, "is a folder, not a file")
    except OSError as error:
        raise UsageProblem(f"cannot read {file}: {error.strerror or error}") from None
    if size == 0:
        raise UsageProblem(f"{file} is empty: no rows to read (the run wrote nothing yet?)")
    try:
        if file.suffix == ".jsonl":
            rows = []
            with file.open(encoding="utf-8") as lines:
                for number, line in enumerate(lines, 1):
                    if line.strip():
                        try:
                            rows.append(json.loads(line))
                        except ValueError:
                            raise UsageProblem(
                                f"{file} line {number} is truncated or corrupt; the other rows are intact "
                                "(read results.csv beside it, or remove that line)"
                            ) from None
            frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=[*COLUMN_NAMES, *JSON_ONLY])
        else:
            frame = pd.read_csv(file, keep_default_na=True)
    except UsageProblem:
        raise
    except OSError as error:  # unreadable (permissions, a folder where the file should be, I/O)
        raise UsageProblem(f"cannot read {file}: {error.strerror or error}") from None
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageProblem(f"{file} is not a results file optbench can read: {message}") from None
    if "case_id" not in frame.columns:
        raise UsageProblem(f"{file} is not an optbench results file: it has no case_id column")
    if "schema_version" in frame.columns:
        refuse_newer_schema(pd.to_numeric(frame["schema_version"], errors="coerce").max(), file)
    return frame


def load(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read one run's rows (a run folder, `results/latest`, results.csv or results.jsonl) as a DataFrame.

    From JSONL the frame also has `samples_ms`, the raw per-round latencies."""
    file = resolve(path)
    frame = _read(file)
    missing = [name for name in COLUMN_NAMES if name not in frame.columns]
    if missing:  # all at once: one column at a time fragments the frame (pandas warns)
        frame = pd.concat(
            [frame, pd.DataFrame(pd.NA, index=frame.index, columns=missing, dtype=object)], axis=1
        )
    for column in COLUMNS:  # the schema's dtypes, whatever the file's format made of them
        frame[column.name] = _as_dtype(frame[column.name], column.dtype)
    extra = [c for c in frame.columns if c not in COLUMN_NAMES]
    return frame[[*COLUMN_NAMES, *extra]]


def _as_dtype(values: pd.Series, dtype: str) -> pd.Series:
    if dtype == "int":
        return pd.to_numeric(values, errors="coerce").astype("Int64")
    if dtype == "float":
        return pd.to_numeric(values, errors="coerce").astype("float64")
    if dtype == "bool":
        return values.map(
            lambda v: pd.NA if v is None or (isinstance(v, float) and math.isnan(v)) else str(v) == "True"
        ).astype(DTYPES["bool"])
    return values


def refuse_impossible(frame: pd.DataFrame, source: object) -> pd.DataFrame:
    """`frame`, or a UsageProblem naming the first row whose numbers cannot be measurements (a passed
    row with a latency that is not a positive number, a negative or NaN raw sample, a speedup that is
    not positive): gating or reporting them would judge garbage as if sound."""
    from optbench.errors import UsageProblem

    for index, row in frame.iterrows():
        if row.get("status") != Status.PASSED:
            continue
        problem = None
        median = row.get("latency_ms_median")
        if (
            median is not None
            and not pd.isna(median)
            and not (math.isfinite(float(median)) and float(median) > 0)
        ):
            problem = f"latency_ms_median {median}"
        samples = row.get("samples_ms")
        if problem is None and isinstance(samples, list):
            bad = [x for x in samples if x is None or not math.isfinite(float(x)) or float(x) < 0]
            if bad:
                problem = f"a raw sample of {bad[0]} ms"
        speedup = row.get("speedup")
        if problem is None and speedup is not None and not pd.isna(speedup) and not float(speedup) > 0:
            problem = f"speedup {speedup}"
        if problem is not None:
            raise UsageProblem(
                f"{source}: row {index + 1} ({row.get('case_id')}) has {problem}: not a measurement; "
                "the file is damaged or edited"
            )
    return frame
