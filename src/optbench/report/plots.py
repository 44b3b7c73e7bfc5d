"""The report's plots, drawn with matplotlib (Agg, no display) into inline SVG: one figure per
model and device and kind, so the page's filters can hide them with the rows they belong to."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from optbench.results.schema import Status
from optbench.results.values import number

KINDS = ("pareto", "latency", "size_speed", "pct_of_peak")
_FAILED = "#b0b0b0"
_POINT = "#1f77b4"
_FRONT = "#d62728"


@dataclass(frozen=True)
class Plot:
    kind: str
    model: str
    device: str
    title: str
    svg: str


def _svg(fig: Figure) -> str:
    buffer = io.StringIO()
    # Text as text (not glyph paths): smaller files, half the drawing time; no bbox_inches="tight",
    # which draws every figure twice (the margins are set from the labels instead).
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "optbench"}):
        fig.savefig(buffer, format="svg")
    text = buffer.getvalue()
    # Drop the XML prologue and DOCTYPE (the SVG is inlined into HTML) and the RDF metadata block
    # (a creation date that would make every published report differ).
    text = text[text.index("<svg") :]
    start, end = text.find("<metadata>"), text.find("</metadata>")
    if start != -1 and end != -1:
        text = text[:start] + text[end + len("</metadata>") :]
    return text


def _figure(rows: int = 1, height: float = 3.2, labels: list[str] | None = None) -> tuple[Figure, object]:
    """A figure tall enough for `rows` bars or boxes, its left margin wide enough for `labels`."""
    width = 6.4
    fig = Figure(figsize=(width, max(height, 0.22 * rows + 1.0)), dpi=72)
    longest = max((len(x) for x in labels), default=0) if labels else 0
    left = min(0.6, 0.12 + longest * 0.075 / width) if labels else 0.12
    fig.subplots_adjust(left=left, right=0.97, bottom=0.5 / fig.get_figheight() + 0.05, top=0.97)
    return fig, fig.add_subplot()


def _label(row: pd.Series) -> str:
    return (
        f"{row['technique']} bs{row['batch_size']}"
        if row.get("batch_size") is not None
        else str(row["technique"])
    )


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both axes (lower cost, higher speedup),
    ordered by cost."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front: list[int] = []
    best = -np.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def _accuracy_cost(row: pd.Series) -> float | None:
    """Points of held-out top-1 lost against fp32 (training rows: after the short training)."""
    delta = number(row.get("top1_delta"))
    if delta is None:
        delta = number(row.get("converge_top1_delta"))
    return None if delta is None else -100.0 * delta


def pareto(rows: pd.DataFrame) -> Figure | None:
    """Speedup against accuracy cost, the Pareto front joined, the accuracy floor as a line."""
    measured = [
        (r, cost)
        for _, r in rows.iterrows()
        if number(r.get("speedup")) is not None and (cost := _accuracy_cost(r)) is not None
    ]
    if not measured:
        return None
    fig, ax = _figure()
    ok = [(r, c) for r, c in measured if r["status"] == Status.PASSED]
    below = [(r, c) for r, c in measured if r["status"] != Status.PASSED]
    for group, color, marker, name in ((ok, _POINT, "o", "passed"), (below, _FAILED, "x", "below floor")):
        if group:
            xs = [c for _, c in group]
            ys = [float(r["speedup"]) for r, _ in group]
            lows = [ys[i] - (number(r.get("speedup_ci95_low")) or ys[i]) for i, (r, _) in enumerate(group)]
            highs = [(number(r.get("speedup_ci95_high")) or ys[i]) - ys[i] for i, (r, _) in enumerate(group)]
            ax.errorbar(
                xs,
                ys,
                yerr=[np.maximum(lows, 0), np.maximum(highs, 0)],
                fmt=marker,
                color=color,
                ecolor=color,
                elinewidth=0.8,
                capsize=2,
                label=name,
            )
    if ok:
        front = pareto_front([(c, float(r["speedup"])) for r, c in ok])
        fx = [ok[i][1] for i in front]
        fy = [float(ok[i][0]["speedup"]) for i in front]
        ax.step(fx, fy, where="post", color=_FRONT, linewidth=1.2, label="Pareto front")
        for i in front:
            ax.annotate(
                _label(ok[i][0]),
                (ok[i][1], float(ok[i][0]["speedup"])),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    floor = number(rows["accuracy_floor"].dropna().iloc[0]) if rows["accuracy_floor"].notna().any() else None
    base = number(rows["top1_fp32"].dropna().iloc[0]) if rows["top1_fp32"].notna().any() else None
    if floor is not None and base is not None:
        ax.axvline(
            100 * base * (1 - floor),
            color="#555555",
            linestyle="--",
            linewidth=1,
            label=f"accuracy floor ({floor:g} of fp32)",
        )
    ax.axhline(1.0, color="#999999", linewidth=0.6)
    ax.set_xlabel("held-out top-1 lost vs fp32 (points)")
    ax.set_ylabel("speedup vs eager fp32")
    ax.legend(fontsize=7, loc="best")
    return fig


def latency(rows: pd.DataFrame) -> Figure | None:
    """Each case's raw per-call latencies, as box plots on a log scale."""
    if "samples_ms" not in rows:
        return None
    data = [
        (_label(r), np.asarray(r["samples_ms"], dtype=float))
        for _, r in rows.iterrows()
        if isinstance(r.get("samples_ms"), (list, tuple, np.ndarray)) and len(r["samples_ms"]) > 0
    ]
    if not data:
        return None
    names = [n for n, _ in data]
    fig, ax = _figure(len(data), labels=names)
    # Drawn as three collections (whiskers, boxes, medians) rather than ax.boxplot's several artists
    # per box, which made this plot most of a large report's time. Box: quartiles; whiskers: the
    # fastest and the slowest call.
    y = np.arange(len(data))
    q1, median, q3 = (np.array([np.percentile(d, q) for _, d in data]) for q in (25, 50, 75))
    ax.hlines(y, [d.min() for _, d in data], [d.max() for _, d in data], color="#555555", linewidth=0.8)
    ax.barh(y, q3 - q1, left=q1, height=0.6, color="#c6dbef", edgecolor=_POINT, linewidth=0.8)
    ax.scatter(median, y, marker="|", s=80, color=_FRONT, zorder=3)
    ax.set_yticks(y, names)
    ax.set_xscale("log")
    # Latencies of one model often lie within one decade, where a log axis shows no labelled tick.
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.invert_yaxis()
    ax.set_xlabel("latency per call (ms, log scale)")
    ax.tick_params(axis="y", labelsize=7)
    return fig


def size_speed(rows: pd.DataFrame) -> Figure | None:
    """Model file size (compressed) against speedup: what each technique trades."""
    points = [
        (r, size / 2**20, float(r["speedup"]))
        for _, r in rows.iterrows()
        if (size := number(r.get("size_compressed_bytes"))) is not None
        and number(r.get("speedup")) is not None
    ]
    if not points:
        return None
    fig, ax = _figure()
    for passed, color, marker in ((True, _POINT, "o"), (False, _FAILED, "x")):
        chosen = [(x, y) for r, x, y in points if (r["status"] == Status.PASSED) == passed]
        if chosen:
            ax.scatter(
                *zip(*chosen, strict=True),
                color=color,
                marker=marker,
                label="passed" if passed else "not passed",
            )
    # Label the trade-off front only (smaller and faster than every other point): labelling every
    # point makes an unreadable heap.
    front = pareto_front([(x, y) for _, x, y in points])
    for i in front:
        r, x, y = points[i]
        ax.annotate(_label(r), (x, y), fontsize=7, xytext=(3, 2), textcoords="offset points")
    ax.axhline(1.0, color="#999999", linewidth=0.6)
    ax.set_xlabel("model file, zlib-compressed (MiB)")
    ax.set_ylabel("speedup vs eager fp32")
    return fig


def pct_of_peak(rows: pd.DataFrame) -> Figure | None:
    """Achieved GFLOP/s as a percentage of the machine's measured ceiling for the row's dtype."""
    points = [(r, p) for _, r in rows.iterrows() if (p := number(r.get("pct_of_peak"))) is not None]
    if not points:
        return None
    labels = [f"{_label(r)} ({r.get('peak_dtype')})" for r, _ in points]
    fig, ax = _figure(len(points), labels=labels)
    ax.barh(range(len(points)), [p for _, p in points], color=_POINT)
    ax.set_yticks(range(len(points)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.axvline(100, color="#555555", linestyle="--", linewidth=1)
    ax.set_xlabel("% of this machine's measured peak")
    return fig


_DRAW = {"pareto": pareto, "latency": latency, "size_speed": size_speed, "pct_of_peak": pct_of_peak}
_TITLES = {
    "pareto": "speedup against accuracy cost",
    "latency": "latency distributions",
    "size_speed": "size against speed",
    "pct_of_peak": "share of the machine's peak",
}


def _draw_group(job: tuple[str, str, pd.DataFrame]) -> list[Plot]:
    model, device, group = job
    out = []
    for kind in KINDS:
        fig = _DRAW[kind](group)
        if fig is not None:
            out.append(Plot(kind, model, device, f"{model} on {device}: {_TITLES[kind]}", _svg(fig)))
    return out


PARALLEL_FROM = 6
"""Model/device groups from which drawing is spread over the CPU cores (a worker costs ~0.3 s)."""


def plots(frame: pd.DataFrame) -> list[Plot]:
    """Every plot the run's rows support, per model and device (inference and training rows; the
    data pipeline's rows have their own grid). Drawing is most of a report's time, so with many
    groups it runs in one process per core."""
    rows = frame[frame["mode"].fillna("inference") != "data"] if "mode" in frame else frame
    jobs = [(str(m), str(d), g) for (m, d), g in rows.groupby(["model", "device"], sort=False)]
    workers = min(len(jobs), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
    if len(jobs) < PARALLEL_FROM or workers < 2:
        return [p for job in jobs for p in _draw_group(job)]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # fork: the workers have matplotlib and pandas imported already.
    context = multiprocessing.get_context(
        "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    )
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        return [p for drawn in pool.map(_draw_group, jobs) for p in drawn]
