"""The report's tables as DataFrames: the comparison grid, the cases that did not pass, the
environment, and the same cases side by side across runs. Rendering is elsewhere."""

from __future__ import annotations

import pandas as pd

from optbench.report.cells import SHORT_STATUS, cell, speedup_text
from optbench.report.runs import Run
from optbench.results.schema import Status
from optbench.results.values import number

GRID_INDEX = ["model", "device", "mode", "batch_size"]
MATCH = ("model", "technique", "mode", "batch_size", "input_shape")
"""Cross-run identity: no device, so a CPU run and a GPU run line up."""


def accuracy_text(row: pd.Series) -> str:
    delta = number(row.get("top1_delta"))
    if delta is None:
        delta = number(row.get("converge_top1_delta"))
    return "" if delta is None else f"{100 * delta:+.1f} pt"


def grid_cell(row: pd.Series) -> str:
    status = str(row.get("status"))
    if status in SHORT_STATUS or number(row.get("speedup")) is None:
        return cell(row, None)
    text = speedup_text(row)
    accuracy = accuracy_text(row)
    if accuracy:
        text += f", {accuracy}"
    if status == Status.FAIL_ACCURACY:
        text += " (below floor)"
    elif status != Status.PASSED:
        text += f" ({status})"
    return text


def grid(frame: pd.DataFrame) -> pd.DataFrame:
    """Models down, techniques across: speedup vs eager fp32 with its 95% interval, then the change
    in held-out top-1 (training rows: after the short training)."""
    if frame.empty:
        return pd.DataFrame()
    cells = frame.assign(cell=frame.apply(grid_cell, axis=1))
    techniques = list(dict.fromkeys(cells["technique"]))
    keyed = cells.assign(**{c: cells[c].astype(object).where(cells[c].notna(), "") for c in GRID_INDEX})
    table = keyed.pivot_table(
        index=GRID_INDEX, columns="technique", values="cell", aggfunc="last", sort=False
    )
    table = table.reindex(columns=techniques).fillna("")
    table.columns.name = None
    return table.reset_index().rename(columns={"batch_size": "bs"})


def not_passed(frame: pd.DataFrame) -> pd.DataFrame:
    """Every case that did not pass, with its status and reason: nothing is dropped silently."""
    rows = frame[frame["status"] != Status.PASSED]
    out = rows[["case_id", "status", "reason"]].copy()
    out["reason"] = out["reason"].fillna("").astype(str).str.replace(r"\s+", " ", regex=True)
    return out.reset_index(drop=True)


NOTE_COLUMNS = (("hardware_note", "hardware"), ("kernel_note", "kernel"))
"""Columns that say why a technique may not pay off on this machine, and what each is about."""


def notes(frame: pd.DataFrame) -> pd.DataFrame:
    """The hardware and kernel notes of a run, each once, with the cases it is about: a technique
    that needs what this machine lacks, or a prepared model that hits a known slow kernel."""
    found: dict[tuple[str, str, str], list[str]] = {}
    for column, kind in NOTE_COLUMNS:
        if column not in frame:
            continue
        for row in frame[frame[column].notna() & (frame[column].astype(str) != "")].itertuples():
            key = (str(row.technique), kind, str(getattr(row, column)))
            found.setdefault(key, []).append(str(row.case_id))
    records = [
        {"technique": t, "about": kind, "note": note, "cases": ", ".join(ids)}
        for (t, kind, note), ids in found.items()
    ]
    return pd.DataFrame(records, columns=["technique", "about", "note", "cases"])


_ENVIRONMENT = (
    ("device_name", "device"),
    ("threads", "threads"),
    ("torch_version", "torch"),
    ("torchvision_version", "torchvision"),
    ("python_version", "python"),
    ("machine_fingerprint", "machine fingerprint"),
    ("git_sha", "commit"),
)


def environment(run: Run) -> pd.DataFrame:
    """What the run ran on and with, one line per fact (several values: a merged or mixed run)."""
    frame = run.rows
    facts: list[tuple[str, str]] = [("run", run.label)]
    for column, name in _ENVIRONMENT:
        if column in frame:
            values = sorted({str(v) for v in frame[column].dropna() if str(v)})
            facts.append((name, ", ".join(values) or "-"))
    if "timestamp" in frame and frame["timestamp"].notna().any():
        stamps = frame["timestamp"].dropna().astype(str)
        facts.append(("finished", f"{stamps.min()} to {stamps.max()}"))
    config = run.manifest.config if run.manifest is not None else None
    profile = config.get("profile") if isinstance(config, dict) else None
    if profile:
        facts.append(("profile", str(profile)))
    if "shard" in frame and frame["shard"].notna().any():
        facts.append(("merged from shards", ", ".join(sorted(frame["shard"].dropna().astype(str).unique()))))
    statuses = frame["status"].value_counts()
    facts.append(("cases", ", ".join(f"{n} {s}" for s, n in statuses.items())))
    return pd.DataFrame(facts, columns=["", "value"])


def cross_run(runs: list[Run]) -> pd.DataFrame:
    """The cases that passed in at least two runs, side by side: each run's median latency and
    speedup, and each later run's latency ratio to the first (below 1: faster than the first)."""
    if len(runs) < 2:
        return pd.DataFrame()
    key = list(MATCH)
    merged: pd.DataFrame | None = None
    for run in runs:
        passed = run.rows[run.rows["status"] == Status.PASSED]
        part = passed[[*key, "device", "latency_ms_median", "speedup"]].copy()
        part = part.assign(**{c: part[c].astype(object).where(part[c].notna(), "") for c in key})
        part = part.drop_duplicates(key, keep="last").rename(
            columns={
                "device": f"device ({run.label})",
                "latency_ms_median": f"ms ({run.label})",
                "speedup": f"speedup ({run.label})",
            }
        )
        merged = part if merged is None else merged.merge(part, on=key, how="outer")
    assert merged is not None
    first = runs[0].label
    latency = [f"ms ({r.label})" for r in runs]
    merged = merged[merged[latency].notna().sum(axis=1) >= 2]
    for run in runs[1:]:
        merged[f"{run.label} / {first}"] = merged[f"ms ({run.label})"] / merged[f"ms ({first})"]
    return merged.rename(columns={"batch_size": "bs"}).reset_index(drop=True)
