"""The gate's outputs: a Markdown summary for a job summary or a pull-request comment, and JSON."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pandas as pd

from optbench.gate.verdicts import (
    IMPROVED,
    MACHINE_CHANGED,
    MISSING,
    NEW,
    NOT_COMPARABLE,
    NOT_SELECTING,
    REGRESSED,
    UNCHANGED,
    Verdict,
    failed,
)

_ORDER = {REGRESSED: 0, IMPROVED: 1, NOT_COMPARABLE: 2, NEW: 3, MISSING: 4, UNCHANGED: 5}


def _fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def headline(verdicts: list[Verdict]) -> str:
    cases = len({v.case_id for v in verdicts})
    counts = Counter(v.verdict for v in verdicts)
    failing = failed(verdicts)
    state = "**FAIL**" if failing else "**pass**"
    acknowledged = sum(1 for v in verdicts if v.verdict == REGRESSED and v.ignored)
    refuted = sum(1 for v in verdicts if v.verdict == REGRESSED and not v.ignored and v.confirmed is False)
    confirmed = sum(1 for v in failing if v.confirmed)
    regressed = f"{counts[REGRESSED] - acknowledged - refuted} regressed"
    if confirmed:
        regressed += f" ({confirmed} confirmed by a second measurement)"
    parts = [regressed, f"{counts[IMPROVED]} improved"]
    if refuted:
        parts.append(f"{refuted} not confirmed")
    parts += [f"{counts[k]} {k.replace('_', ' ')}" for k in (NOT_COMPARABLE, NEW, MISSING) if counts[k]]
    if acknowledged:
        parts.append(f"{acknowledged} acknowledged")
    return f"optbench gate: {state} — {', '.join(parts)} (metrics of {cases} cases)"


def environment_differences(base: pd.DataFrame, head: pd.DataFrame) -> list[str]:
    lines = []
    for column in (
        "machine_fingerprint",
        "device_name",
        "torch_version",
        "torchvision_version",
        "threads",
        "git_sha",
    ):
        if column in base and column in head:
            b, h = (
                sorted(set(base[column].dropna().astype(str))),
                sorted(set(head[column].dropna().astype(str))),
            )
            if b != h:
                lines.append(f"- `{column}`: baseline {', '.join(b) or '-'}, this run {', '.join(h) or '-'}")
    return lines


def timing_differences(base: Any, head: Any) -> list[str]:
    """What two runs' manifests (`Manifest` or None) record differently about how cases were timed,
    not which: the allocator mode (`--malloc`) and the speed-changing environment (malloc tunables,
    LD_PRELOAD, thread counts). Either can move absolute latency by up to a quarter on its own."""
    if base is None or head is None:
        return []

    def shown(value: Any) -> str:
        return "unset" if value is None else repr(value) if value == "" else str(value)

    lines = []
    for key in sorted(NOT_SELECTING):
        b, h = base.config.get(key), head.config.get(key)
        if b != h:
            lines.append(f"- `{key}`: baseline {shown(b)}, this run {shown(h)}")
    for key in sorted(set(base.environment) | set(head.environment)):
        b, h = base.environment.get(key), head.environment.get(key)
        if b != h:
            lines.append(f"- `{key}`: baseline {shown(b)}, this run {shown(h)}")
    return lines


def noise_warnings(head: pd.DataFrame) -> list[str]:
    if "noisy" not in head:
        return []
    noisy = head[head["noisy"].fillna(False).astype(bool)]
    return [f"- `{c}`: IQR above 10% of the median in this run" for c in noisy["case_id"]]


def markdown(
    verdicts: list[Verdict],
    base: pd.DataFrame | None = None,
    head: pd.DataFrame | None = None,
    timing: list[str] | None = None,
) -> str:
    """The gate's summary. `timing`: timing_differences of the two runs' manifests."""
    lines = [f"## {headline(verdicts)}", ""]
    # Another machine makes every case's absolute latency and memory not comparable: one line, not
    # two table rows per case.
    machine = [v for v in verdicts if v.verdict == NOT_COMPARABLE and v.reason.startswith(MACHINE_CHANGED)]
    if machine:
        lines += [
            f"Different machines ({machine[0].reason.removeprefix(MACHINE_CHANGED).strip(' ()')}): only the "
            "machine-independent metrics are gated: the speedup against eager fp32 (latency_vs_eager), "
            "top-1 and size.",
            "",
        ]
    shown = [v for v in verdicts if (v.verdict != UNCHANGED or v.reason) and v not in machine]
    if shown:
        lines += [
            "| case | metric | baseline | this run | ratio | 95% interval | p (corrected) | verdict |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for v in sorted(shown, key=lambda v: (_ORDER.get(v.verdict, 9), v.case_id, v.metric)):
            interval = f"[{v.low:.3f}, {v.high:.3f}]" if v.low is not None and v.high is not None else "-"
            p = f"{v.p_adjusted:.2g}" if v.p_adjusted is not None else "-"
            fails = v.verdict == REGRESSED and not v.ignored and v.confirmed is not False
            verdict = f"**{v.verdict}**" if fails else v.verdict
            if v.verdict == REGRESSED and v.confirmed is not None:
                verdict += " (confirmed)" if v.confirmed else " (not confirmed)"
            note = f" ({v.ignored})" if v.ignored else (f": {v.reason}" if v.reason else "")
            lines.append(
                f"| `{v.case_id}` | {v.metric} | {_fmt(v.base)} | {_fmt(v.head)} | {_fmt(v.ratio, 3)} | "
                f"{interval} | {p} | {verdict}{note} |"
            )
    unchanged = len({v.case_id for v in verdicts}) - len({v.case_id for v in shown})
    lines += ["", f"{unchanged} case{'' if unchanged == 1 else 's'} unchanged in every metric."]
    if machine:
        lines += [
            "",
            f"Not compared in {len({v.case_id for v in machine})} cases: absolute latency and peak memory "
            f"({machine[0].reason}; the latency relative to eager fp32 is gated).",
        ]
    if base is not None and head is not None:
        env = environment_differences(base, head)
        if env:
            lines += [
                "",
                "**Environment differences** (absolute latency and memory are gated only on the same machine):",
                *env,
            ]
        if timing:
            lines += [
                "",
                "**Timed under other settings** (still gated; either can move absolute latency on its own):",
                *timing,
            ]
        noise = noise_warnings(head)
        if noise:
            lines += ["", "**Noise warnings:**", *noise]
    return "\n".join(lines) + "\n"


def verdicts_json(verdicts: list[Verdict]) -> str:
    payload: dict[str, Any] = {
        "headline": headline(verdicts),
        "failed": bool(failed(verdicts)),
        "verdicts": [v.as_dict() for v in verdicts],
    }
    return json.dumps(payload, indent=2) + "\n"
