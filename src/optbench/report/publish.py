"""`optbench publish`: refresh results/published/ (the committed report) from a run, and the README's
published block from the same Markdown, so the README's tables are the run's and nothing typed."""

from __future__ import annotations

import os
from pathlib import Path

from optbench.errors import UsageProblem
from optbench.report.build import HTML, MARKDOWN, render
from optbench.report.markdown import md_table, recommendations_frame
from optbench.report.recommend import Limits, recommend
from optbench.report.runs import Run, read_runs

START = "<!-- optbench publish: start (written by `optbench publish`; edits here are overwritten) -->"
END = "<!-- optbench publish: end -->"


def readme_block(run_path: str, folder: Path, limits: Limits) -> str:
    """What goes between the README's markers: the run, the recommendation table, the links."""
    run = read_runs([run_path])[0]
    shas = sorted({str(s) for s in run.rows["git_sha"].dropna() if str(s)})
    devices = sorted({str(s) for s in run.rows["device_name"].dropna() if str(s)})
    torch = sorted({str(s) for s in run.rows["torch_version"].dropna() if str(s)})
    stamps = run.rows["timestamp"].dropna().astype(str)
    when = stamps.max()[:10] if not stamps.empty else "?"
    cpu = sorted(
        {
            f"{c}; {i}"
            for c, i in zip(_column(run, "cpu_capability"), _column(run, "cpu_isa"), strict=True)
            if c or i
        }
    )
    planned = run.manifest.matrix_cases if run.manifest is not None else 0
    done = len(run.rows)
    # A run stopped early publishes what it measured, and says it is part of its matrix.
    extent = (
        f"stopped {when} after {done} of its {planned} cases"
        if planned > done
        else f"finished {when}: {done} cases"
    )
    table = recommendations_frame(recommend(run.rows, limits)).drop(columns=["why"])
    return "\n".join(
        [
            START,
            f"Run `{run.label}` of commit {', '.join(s[:12] for s in shas) or '?'} on {', '.join(devices) or '?'}"
            + (f" ({', '.join(cpu)})" if cpu else "")
            + f", torch {', '.join(torch) or '?'}, {extent}. Full report: "
            f"[{folder.as_posix()}/{MARKDOWN}]({folder.as_posix()}/{MARKDOWN}) and "
            f"[{folder.as_posix()}/{HTML}]({folder.as_posix()}/{HTML}) (plots; download and open it).",
            "",
            md_table(table),
            END,
        ]
    )


def _column(run: Run, name: str) -> list[str]:
    """The row values of a text column, "" where missing (older runs lack the hardware columns)."""
    if name not in run.rows:
        return [""] * len(run.rows)
    return [str(v) if isinstance(v, str) else "" for v in run.rows[name]]


def _replace_block(text: str, block: str, readme: Path) -> str:
    if START not in text or END not in text:
        raise UsageProblem(f"{readme} has no published block: add the two lines {START!r} and {END!r}")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return head + block + tail


def publish(run_path: str, folder: Path, readme: Path | None, limits: Limits) -> list[Path]:
    """Render everything first; write only when all of it rendered (bad input writes nothing)."""
    markdown, page = render([run_path], limits)
    new_readme = None
    if readme is not None:
        if not readme.exists():
            raise UsageProblem(f"no such README: {readme}")
        relative = Path(os.path.relpath(folder.resolve(), readme.resolve().parent))
        new_readme = _replace_block(
            readme.read_text(encoding="utf-8"), readme_block(run_path, relative, limits), readme
        )
    written = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in ((MARKDOWN, markdown), (HTML, page)):
            target = folder / name
            target.write_text(text, encoding="utf-8")
            written.append(target)
        if new_readme is not None and readme is not None:
            readme.write_text(new_readme, encoding="utf-8")
            written.append(readme)
    except OSError as error:
        raise UsageProblem(f"could not write the published report: {error.strerror}") from None
    return written
