"""The compact comparison printed at the end of a run: models down, techniques across."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from optbench.report.cells import ACCURACY_FLAGS, cell
from optbench.report.tables import notes
from optbench.results.derive import MARGIN, clear_difference
from optbench.results.schema import Status
from optbench.results.values import number as _num


def _unclear(row: pd.Series) -> bool:
    """A speedup whose 95% interval reaches within MARGIN (3%) of 1.0: no clear difference from eager fp32."""
    if row.get("technique") == "eager":
        return False
    return clear_difference(_num(row.get("speedup_ci95_low")), _num(row.get("speedup_ci95_high"))) is False


def _cell(row: pd.Series) -> str:
    if row["status"] != Status.PASSED:
        return cell(row, None)
    speedup = _num(row.get("speedup"))
    median = row["latency_ms_median"]
    marks = "~" if _num(row.get("noisy")) else ""  # an unrecorded (NA) value reads as not noisy
    if speedup is None:
        return f"{median:.3g}ms{marks}"
    return f"{speedup:.2f}x{'=' if _unclear(row) else ''} {median:.3g}ms{marks}"


def _top1_cell(row: pd.Series, prefix: str = "") -> str:
    """'0.975 (+0.003)' from `<prefix>top1` and `<prefix>top1_delta`, flagged by an accuracy status."""
    top1 = _num(row.get(f"{prefix}top1"))
    if top1 is None:
        return cell(row, None, otherwise="-")
    delta = _num(row.get(f"{prefix}top1_delta"))
    flag = ACCURACY_FLAGS.get(str(row["status"]), "")
    if delta is None:
        return f"{top1:.3f}{flag}"
    return f"{top1:.3f} ({delta:+.3f}){flag}"


def _accuracy_cell(row: pd.Series) -> str:
    return _top1_cell(row)


def _converge_cell(row: pd.Series) -> str:
    return _top1_cell(row, "converge_")


def _loader_cell(row: pd.Series) -> str:
    rate = _num(row.get("loader_samples_per_s"))
    return cell(row, None if rate is None else f"{rate:.0f}/s")


def _pivot(frame: pd.DataFrame, render: Callable[[pd.Series], str]) -> str:
    frame = frame.copy()
    frame["cell"] = frame.apply(render, axis=1)
    techniques = list(dict.fromkeys(frame["technique"]))
    table = frame.pivot_table(
        index=["model", "device", "mode", "batch_size"],
        columns="technique",
        values="cell",
        aggfunc="last",
        sort=False,
    )
    table = table.reindex(columns=techniques).fillna("-")
    table.columns.name = None
    return table.reset_index().rename(columns={"batch_size": "bs"}).to_string(index=False)


def comparison_table(frame: pd.DataFrame) -> str:
    """One line per model/device/mode/batch, one column per technique: 'speedup median-latency',
    then the same grid for held-out top-1 when the run has accuracy."""
    if frame.empty:
        return "(no cases)"
    legend = (
        "cells: speedup vs eager fp32, then median latency; = no clear difference (the speedup's 95% "
        f"interval reaches within {MARGIN:.0%} of 1.0); ~ noisy (IQR > 10% of median); skip/FAILED/OOM: see reasons"
    )
    text = f"{_pivot(frame, _cell)}\n{legend}"
    if "top1" in frame.columns and frame["top1"].notna().any():
        inference = frame[frame["top1"].notna() | (frame.get("mode") == "inference")]
        text += f"\n\nheld-out top-1 (change vs eager fp32){_sources(inference)}:\n{_pivot(inference, _accuracy_cell)}"
    if "converge_top1" in frame.columns and frame["converge_top1"].notna().any():
        training = frame[frame["mode"] == "training"]
        text += (
            "\n\ntraining: held-out top-1 after the short seeded training (change vs eager fp32):\n"
            f"{_pivot(training, _converge_cell)}"
        )
    if "loader_samples_per_s" in frame.columns and frame["loader_samples_per_s"].notna().any():
        data = frame[frame["mode"] == "data"]
        text += f"\n\ndata: samples per second of the loader alone (no training step):\n{_pivot(data, _loader_cell)}"
    return text


def unclear_speedups(frame: pd.DataFrame) -> str:
    """The cases whose speedup is no clear difference from eager fp32, with their intervals."""
    if "speedup_ci95_low" not in frame.columns:
        return ""
    rows = frame[(frame["status"] == Status.PASSED) & frame.apply(_unclear, axis=1)]
    if rows.empty:
        return ""
    cases = ", ".join(
        f"{r.case_id} {r.speedup:.2f}x [{r.speedup_ci95_low:.2f}, {r.speedup_ci95_high:.2f}]"
        for r in rows.itertuples()
    )
    return (
        f"no clear difference from eager fp32 (the speedup's 95% interval reaches within {MARGIN:.0%} of "
        f"1.0) ({len(rows)}):\n    {cases}"
    )


def above_ceiling(frame: pd.DataFrame) -> str:
    """Rows faster than the measured ceiling for their dtype: the ceiling missed a faster kernel.
    The rows stay as measured; the ceiling is what needs fixing."""
    if "pct_of_peak" not in frame.columns:
        return ""
    rows = frame[pd.to_numeric(frame["pct_of_peak"], errors="coerce") > 100]
    if rows.empty:
        return ""
    cases = ", ".join(f"{r.case_id} {r.pct_of_peak:.0f}% of {r.peak_dtype}" for r in rows.itertuples())
    return (
        f"above the measured ceiling ({len(rows)}): the ceiling missed a faster kernel; delete "
        f"<cache>/ceilings/ to measure it again, and report the case so its workload joins the ceilings:\n"
        f"    {cases}"
    )


def weak_models(frame: pd.DataFrame) -> str:
    """Models whose trained weights stopped below their recipe's target, once each."""
    if "below_target" not in frame.columns:
        return ""
    weak = frame[frame["below_target"].fillna(False).astype(bool)].drop_duplicates("model")
    if weak.empty:
        return ""
    lines = [weak_model_warning(r.model, r.trained_top1, r.target_top1) for r in weak.itertuples()]
    return f"trained below target ({len(weak)}):\n    " + "\n    ".join(lines)


def weak_model_warning(model: str, top1: float, target: float) -> str:
    return (
        f"{model} reached held-out top-1 {top1:.3f}, below its recipe's target {target:.2f}: its rows compare "
        "techniques on a poorly trained model (raise max_epochs or tune lr in its TrainRecipe, or use "
        "--data-dir with more data)"
    )


def hardware_notes(frame: pd.DataFrame) -> str:
    """Each hardware or kernel note once, with its cases: why a technique may not pay off here."""
    noted = notes(frame)
    if noted.empty:
        return ""
    lines = [f"{r.technique} ({r.about}): {r.note}\n    {r.cases}" for r in noted.itertuples()]
    return f"hardware and kernel notes ({len(noted)}), measured anyway:\n" + "\n".join(lines)


def skip_reasons(frame: pd.DataFrame) -> str:
    """Skipped and failed cases grouped by reason, so nothing is dropped silently."""
    lines: list[str] = []
    if "reason" not in frame.columns:
        return ""
    for status in (Status.SKIPPED, Status.FAILED, Status.OOM, Status.DIVERGED):
        subset = frame[frame["status"] == status]
        for reason, group in subset.groupby("reason", sort=False):
            ids = ", ".join(group["case_id"])
            lines.append(f"{status} ({len(group)}): {reason}\n    {ids}")
    return "\n".join(lines)


def _sources(frame: pd.DataFrame) -> str:
    """Where the accuracy figures come from, with a nudge toward the user's own data."""
    if "accuracy_source" not in frame:
        return ""
    found = sorted({str(v) for v in frame["accuracy_source"].dropna() if str(v)})
    if not found:
        return ""
    nudge = (
        "; pass --data-dir to measure it on your data"
        if any(f.startswith("the embedded task") for f in found)
        else ""
    )
    return f", measured on {' and '.join(found)}{nudge}"


def run_summary(frame: pd.DataFrame) -> str:
    """What a run ends with, and what `optbench show` prints: the grids, then the unclear speedups,
    rows above the machine's ceiling, hardware and kernel notes, and the skipped and failed cases."""
    parts = [
        comparison_table(frame),
        weak_models(frame),
        unclear_speedups(frame),
        above_ceiling(frame),
        hardware_notes(frame),
        skip_reasons(frame),
    ]
    return "\n\n".join(p for p in parts if p)
