"""Results: one row per case, appended to the run's CSV and JSONL as the run goes; read back with pandas.

The columns are a public interface, declared once with their types in `optbench.results.schema`; the
docs' table of them is generated from there. Run folders are written and read by `optbench.results.store`.
"""

from __future__ import annotations

from optbench.results.schema import (
    BY_NAME,
    COLUMN_NAMES,
    COLUMNS,
    JSON_ONLY,
    SCHEMA_VERSION,
    TECHNIQUE_COLUMNS,
    AccuracyVerdict,
    Column,
    Status,
)
from optbench.results.store import ResultsWriter, load, refuse_impossible, resolve

__all__ = [
    "AccuracyVerdict",
    "BY_NAME",
    "COLUMNS",
    "COLUMN_NAMES",
    "JSON_ONLY",
    "SCHEMA_VERSION",
    "TECHNIQUE_COLUMNS",
    "Column",
    "ResultsWriter",
    "Status",
    "load",
    "refuse_impossible",
    "resolve",
]
