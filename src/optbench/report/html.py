"""The report as one static HTML file: every table from a DataFrame, every plot inline SVG, a few
lines of script for the filters. It opens offline and loads nothing from anywhere."""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable

import pandas as pd

from optbench.report.cells import speedup_text
from optbench.report.markdown import limits_text, recommendations_frame
from optbench.report.plots import Plot
from optbench.report.recommend import Limits, Recommendation
from optbench.report.runs import Run
from optbench.report.tables import cross_run, environment, grid, not_passed, notes

RowAttrs = Callable[[pd.Series], dict[str, str]]

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.5em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0; font-size: 12px; }
th, td { border: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; position: sticky; top: 0; }
td.verdict-recommended { background: #e6f4ea; } td.verdict-no.clear.winner { background: #fff4e0; }
.filters { position: sticky; top: 0; background: #fff; padding: .5em 0; z-index: 2; }
.filters label { margin-right: 1em; }
.plots { display: flex; flex-wrap: wrap; gap: 1em; }
figure.plot { margin: 0; border: 1px solid #eee; padding: .3em; box-sizing: border-box; width: calc(50% - .5em); }
figure.plot svg { display: block; max-width: 100%; height: auto; }
figcaption { font-size: 12px; color: #555; }
.scroll { overflow-x: auto; max-height: 40em; }
"""

_SCRIPT = """
(function () {
  const selects = { model: "filter-model", device: "filter-device", family: "filter-family" };
  function matches(el, key, want) {
    if (!want) return true;
    const value = el.dataset[key];
    if (value === undefined) return true;
    if (key === "family") return value.split("+").includes(want);
    return value === want;
  }
  function apply() {
    const wanted = {};
    for (const key in selects) wanted[key] = document.getElementById(selects[key]).value;
    document.querySelectorAll("[data-model], [data-device], [data-family]").forEach(function (el) {
      if (el.tagName === "SELECT" || el.tagName === "OPTION") return;
      let show = true;
      for (const key in wanted) show = show && matches(el, key, wanted[key]);
      el.style.display = show ? "" : "none";
    });
  }
  for (const key in selects) document.getElementById(selects[key]).addEventListener("change", apply);
})();
"""


def _esc(value: object) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and pd.isna(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def html_table(
    frame: pd.DataFrame,
    table_id: str = "",
    row_attrs: RowAttrs | None = None,
    cell_class: dict[str, Callable[[pd.Series], str]] | None = None,
) -> str:
    """A DataFrame as an HTML table whose rows can carry data-* attributes for the filters."""
    if frame.empty:
        return "<p>(none)</p>"
    ident = f' id="{table_id}"' if table_id else ""
    head = "".join(f"<th>{_esc(c)}</th>" for c in frame.columns)
    body = []
    for _, row in frame.iterrows():
        attrs = "".join(
            f' data-{k}="{html.escape(v)}"' for k, v in (row_attrs(row) if row_attrs else {}).items()
        )
        cells = []
        for column in frame.columns:
            css = (cell_class or {}).get(column)
            klass = f' class="{html.escape(css(row))}"' if css else ""
            cells.append(f"<td{klass}>{_esc(row[column])}</td>")
        body.append(f"<tr{attrs}>{''.join(cells)}</tr>")
    return f'<div class="scroll"><table{ident}><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _select(name: str, label: str, values: Iterable[str]) -> str:
    options = "".join(f'<option value="{html.escape(v)}">{html.escape(v)}</option>' for v in values)
    return (
        f'<label>{label} <select id="filter-{name}"><option value="">all</option>{options}</select></label>'
    )


def _families(frames: list[pd.DataFrame]) -> list[str]:
    names: set[str] = set()
    for frame in frames:
        for value in frame["family"].dropna().astype(str):
            names.update(value.split("+"))
    return sorted(names)


def cases_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Every row, the columns a reader compares first."""
    out = pd.DataFrame(
        {
            "case": frame["case_id"],
            "family": frame["family"],
            "status": frame["status"],
            "median ms": frame["latency_ms_median"],
            "speedup [95%]": frame.apply(speedup_text, axis=1),
            "top-1": frame["top1"],
            "top-1 change": frame["top1_delta"],
            "MiB (zlib)": pd.to_numeric(frame["size_compressed_bytes"], errors="coerce") / 2**20,
            "peak MiB": frame["peak_mem_mb"],
            "% of peak": frame["pct_of_peak"],
        }
    )
    return out


def _attrs(columns: tuple[str, ...]) -> RowAttrs:
    def attrs(row: pd.Series) -> dict[str, str]:
        return {
            k: str(row[c])
            for k, c in zip(("model", "device", "family"), columns, strict=True)
            if c and c in row
        }

    return attrs


def report_html(
    runs: list[Run],
    recommendations: dict[str, list[Recommendation]],
    limits: Limits,
    plots: dict[str, list[Plot]],
) -> str:
    labels = ", ".join(r.label for r in runs)
    frames = [r.rows for r in runs]
    models = sorted({str(m) for f in frames for m in f["model"].dropna()})
    devices = sorted({str(d) for f in frames for d in f["device"].dropna()})
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">',
        f"<title>optbench report: {html.escape(labels)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>optbench report: {html.escape(labels)}</h1>",
        '<div class="filters">',
        _select("model", "model", models),
        _select("device", "device", devices),
        _select("family", "technique family", _families(frames)),
        "</div>",
    ]
    for number, run in enumerate(runs):
        title = f" ({html.escape(run.label)})" if len(runs) > 1 else ""
        recs = recommendations[run.label]
        table = recommendations_frame(recs)
        family = dict(zip(run.rows["technique"].astype(str), run.rows["family"].astype(str), strict=True))

        def rec_attrs(
            row: pd.Series, recs: list[Recommendation] = recs, family: dict = family
        ) -> dict[str, str]:
            rec = recs[int(row.name)]
            attrs = {"model": rec.model, "device": rec.device, "technique": rec.technique or ""}
            if rec.technique:
                attrs["family"] = family.get(rec.technique, "")
            return attrs

        parts += [
            f"<h2>Recommendation per model and device{title}</h2>",
            f"<p>The fastest technique that passed within the limits: {html.escape(limits_text(limits))}. "
            "Speedups are against eager fp32 in the same run; their intervals are widened for the number of "
            "candidates compared (Bonferroni), so a winner is clear of eager and of the runner-up together. "
            "Only techniques with accuracy evidence within the floor qualify.</p>",
            html_table(
                table,
                "recommendations" if number == 0 else f"recommendations-{number + 1}",
                rec_attrs,
                {"use": lambda row: "technique", "verdict": lambda row: f"verdict-{row['verdict']}"},
            ),
            f"<h2>Plots{title}</h2>",
            '<div class="plots">',
        ]
        for plot in plots[run.label]:
            parts.append(
                f'<figure class="plot" data-plot="{plot.kind}" data-model="{html.escape(plot.model)}" '
                f'data-device="{html.escape(plot.device)}"><figcaption>{html.escape(plot.title)}</figcaption>'
                f"{plot.svg}</figure>"
            )
        parts += [
            "</div>",
            f"<h2>Comparison grid{title}</h2>",
            "<p>Speedup vs eager fp32 [95% interval], then the change in held-out top-1 (training rows: "
            "after the short training).</p>",
            html_table(grid(run.rows), row_attrs=_attrs(("model", "device", ""))),
            f"<h2>Every case{title}</h2>",
            html_table(
                cases_frame(run.rows).assign(model=run.rows["model"], device=run.rows["device"]),
                row_attrs=_attrs(("model", "device", "family")),
            ),
        ]
    if len(runs) > 1:
        parts += [
            "<h2>Across runs</h2>",
            f"<p>Cases that passed in at least two runs; <code>X / {html.escape(runs[0].label)}</code> is X's "
            "median latency over the first run's (below 1: X is faster).</p>",
            html_table(cross_run(runs), row_attrs=_attrs(("model", "", ""))),
        ]
    for run in runs:
        title = f" ({html.escape(run.label)})" if len(runs) > 1 else ""
        noted = notes(run.rows)
        if not noted.empty:
            parts += [f"<h2>Hardware and kernel notes{title}</h2>", html_table(noted)]
        failed = not_passed(run.rows)
        parts += [f"<h2>Skipped and failed cases{title}</h2>", html_table(failed)]
    parts.append("<h2>Environment</h2>")
    parts += [html_table(environment(run)) for run in runs]
    parts += [f"<script>{_SCRIPT}</script>", "</body></html>"]
    return "\n".join(parts) + "\n"
