"""The report as Markdown, for a pull-request comment or a GitHub job summary."""

from __future__ import annotations

import pandas as pd

from optbench.report.recommend import Limits, Recommendation
from optbench.report.runs import Run
from optbench.report.tables import cross_run, environment, grid, not_passed, notes


def _cell(value: object) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)) or value is pd.NA:
        return ""
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def md_table(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (pandas' to_markdown needs tabulate; this needs nothing)."""
    if frame.empty:
        return "(none)"
    header = "| " + " | ".join(_cell(c) for c in frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(_cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def recommendations_frame(recommendations: list[Recommendation]) -> pd.DataFrame:
    rows = []
    for r in recommendations:
        rows.append(
            {
                "model": r.model,
                "device": r.device,
                "mode": r.mode,
                "bs": r.batch_size,
                "input": r.input_shape,
                "use": r.technique or "-",
                "speedup": r.best.interval() if r.best else "-",
                "verdict": r.verdict,
                "runner-up": f"{r.runner_up.technique} {r.runner_up.interval()}" if r.runner_up else "-",
                "margin": f"{100 * (r.margin - 1):+.0f}%" if r.margin is not None else "-",
                "why": r.reason,
            }
        )
    return pd.DataFrame(rows)


def limits_text(limits: Limits) -> str:
    parts = [
        f"top-1 at least {limits.accuracy_floor:g} of fp32's"
        if limits.accuracy_floor is not None
        else "each row's own accuracy floor (fail_accuracy rows are out)"
    ]
    if limits.max_size_mb is not None:
        parts.append(f"file at most {limits.max_size_mb:g} MiB (compressed)")
    if limits.max_memory_mb is not None:
        parts.append(f"peak memory at most {limits.max_memory_mb:g} MiB")
    return "; ".join(parts)


def report_markdown(runs: list[Run], recommendations: dict[str, list[Recommendation]], limits: Limits) -> str:
    labels = ", ".join(r.label for r in runs)
    out = [f"# optbench report: {labels}", ""]
    for run in runs:
        title = f" ({run.label})" if len(runs) > 1 else ""
        out += [
            f"## Recommendation per model and device{title}",
            "",
            f"The fastest technique that passed within the limits: {limits_text(limits)}. Speedups are "
            "against eager fp32 in the same run; their intervals are widened for the number of candidates "
            "compared (Bonferroni), so a winner is clear of eager and of the runner-up together. Only "
            "techniques with accuracy evidence within the floor qualify.",
            "",
            md_table(recommendations_frame(recommendations[run.label])),
            "",
            f"## Comparison grid{title}",
            "",
            "Speedup vs eager fp32 [95% interval], then the change in held-out top-1 (training rows: after "
            "the short training); skip / FAILED / OOM: see below.",
            "",
            md_table(grid(run.rows)),
            "",
        ]
    if len(runs) > 1:
        out += [
            "## Across runs",
            "",
            f"Cases that passed in at least two runs; `X / {runs[0].label}` is X's median latency over "
            f"{runs[0].label}'s (below 1: X is faster). Speedups stay within-run ratios.",
            "",
            md_table(cross_run(runs)),
            "",
        ]
    for run in runs:
        title = f" ({run.label})" if len(runs) > 1 else ""
        noted = notes(run.rows)
        if not noted.empty:
            out += [
                f"## Hardware and kernel notes{title}",
                "",
                "Measured anyway; read these rows knowing what this machine lacks or which slow "
                "kernel they hit.",
                "",
                md_table(noted),
                "",
            ]
        out += [f"## Skipped and failed cases{title}", "", md_table(not_passed(run.rows)), ""]
    out += ["## Environment", ""]
    for run in runs:
        out += [md_table(environment(run)), ""]
    return "\n".join(out)
