"""A run's rows in formats dashboards already read: Bencher Metric Format, and github-action-benchmark's
customSmallerIsBetter / customBiggerIsBetter."""

from __future__ import annotations

from typing import Any

import pandas as pd

from optbench.results.schema import Status
from optbench.results.values import number as _num


def _passed(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["status"] == Status.PASSED]


def bencher_metric_format(frame: pd.DataFrame) -> dict[str, dict[str, dict[str, float]]]:
    """{benchmark: {measure: {value, lower_value, upper_value}}} (https://bencher.dev/docs/reference/bencher-metric-format/)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for _, row in _passed(frame).iterrows():
        measures: dict[str, dict[str, float]] = {}
        for measure, value, low, high in (
            ("latency", "latency_ms_median", "latency_ms_min", "latency_ms_p99"),
            ("speedup", "speedup", "speedup_ci95_low", "speedup_ci95_high"),
        ):
            entry = _metric(row, value, low, high)
            if entry:
                measures[measure] = entry
        for column, measure in (
            ("throughput", "throughput"),
            ("top1", "top1"),
            ("size_compressed_bytes", "file-size"),
        ):
            value = _num(row.get(column))
            if value is not None:
                measures[measure] = {"value": value}
        out[str(row["case_id"])] = measures
    return out


def _metric(row: pd.Series, value: str, low: str, high: str) -> dict[str, float] | None:
    """{value, lower_value, upper_value} from three columns (the bounds only when both are there)."""
    center = _num(row.get(value))
    if center is None:
        return None
    entry = {"value": center}
    lower, upper = _num(row.get(low)), _num(row.get(high))
    if lower is not None and upper is not None:
        entry.update(lower_value=lower, upper_value=upper)
    return entry


def github_action_benchmark(frame: pd.DataFrame, bigger_is_better: bool = False) -> list[dict[str, Any]]:
    """customSmallerIsBetter (median latency, ms) or customBiggerIsBetter (speedup against eager fp32)."""
    entries = []
    for _, row in _passed(frame).iterrows():
        if bigger_is_better:
            value = _num(row.get("speedup"))
            low, high = _num(row.get("speedup_ci95_low")), _num(row.get("speedup_ci95_high"))
            unit, spread = "x", f"[{low:.3f}, {high:.3f}]" if low is not None and high is not None else None
        else:
            value = _num(row.get("latency_ms_median"))
            iqr = _num(row.get("latency_ms_iqr"))
            unit, spread = "ms", f"± {iqr / 2:.3f}" if iqr is not None else None
        if value is None:
            continue
        entry: dict[str, Any] = {"name": str(row["case_id"]), "unit": unit, "value": value}
        if spread:
            entry["range"] = spread
        entries.append(entry)
    return entries
