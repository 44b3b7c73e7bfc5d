"""`optbench report`: read runs, decide, draw, and write report.md and report.html together."""

from __future__ import annotations

import os
from pathlib import Path

from optbench.errors import UsageProblem
from optbench.report.html import report_html
from optbench.report.markdown import report_markdown
from optbench.report.plots import plots
from optbench.report.recommend import Limits, recommend
from optbench.report.runs import read_runs

MARKDOWN = "report.md"
HTML = "report.html"


def render(paths: list[str], limits: Limits) -> tuple[str, str]:
    """(Markdown, HTML) of the runs at these paths."""
    runs = read_runs(paths)
    recommendations = {run.label: recommend(run.rows, limits) for run in runs}
    drawn = {run.label: plots(run.rows) for run in runs}
    return report_markdown(runs, recommendations, limits), report_html(runs, recommendations, limits, drawn)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_report(paths: list[str], out: Path, limits: Limits) -> tuple[Path, Path]:
    """Render first, then write both files: bad input writes nothing."""
    markdown, page = render(paths, limits)
    try:
        out.mkdir(parents=True, exist_ok=True)
        targets = out / MARKDOWN, out / HTML
        _write_atomically(targets[0], markdown)
        _write_atomically(targets[1], page)
    except OSError as error:
        raise UsageProblem(f"could not write the report to {out}: {error.strerror}") from None
    return targets
