"""Gate thresholds from `[tool.optbench.gate]` in pyproject.toml, with per-metric defaults, per-case
overrides (shell patterns on case ids) and an ignore list that needs no code change.

Each key is declared once, as a field below: its name is the key, with its type, default, range and
help; the checks and their one-line errors, and the docs' table (`gate_settings_markdown`), come
from those declarations.
"""

from __future__ import annotations

import fnmatch
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from optbench.errors import UsageProblem


def _threshold(default: float | None, help: str, *, whole: bool = False, between: bool = False) -> Any:
    """One threshold: a non-negative number (a whole one when `whole`; None, its default, turns it
    off), strictly between 0 and 1 when `between`."""
    return field(default=default, metadata={"help": help, "whole": whole, "between": between})


@dataclass(frozen=True)
class Thresholds:
    latency_pct: float = _threshold(
        10.0, "A latency change smaller than this many percent is never a regression, however significant."
    )
    ab_latency_pct: float = _threshold(
        5.0,
        "The same for `optbench ab`, where base and head are timed in alternating slices of one case and "
        "the paired ratios are tighter than two separate runs' samples (see the README's gate figures).",
    )
    alpha: float = _threshold(
        0.01,
        "Family-wise significance level after correcting for the number of latency comparisons.",
        between=True,
    )
    accuracy_drop: float = _threshold(
        0.005,
        "Held-out top-1 may drop this much (absolute: 0.005 is half a point) before it is a regression.",
    )
    size_pct: float = _threshold(1.0, "Model size (compressed bytes) may grow this many percent.")
    memory_pct: float = _threshold(
        10.0, "Peak memory may grow this many percent (compared on the same machine only)."
    )
    fail_on_improvement_pct: float | None = _threshold(
        None, "Fail when latency improves by more than this (the baseline is stale: refresh it)."
    )
    min_samples: int = _threshold(
        5, "Fewer raw samples than this on either side: not_comparable.", whole=True
    )


@dataclass(frozen=True)
class GateConfig:
    thresholds: Thresholds = field(default_factory=Thresholds)
    """Every threshold's own key, at the table's top level."""
    correction: str = field(
        default="holm",
        metadata={
            "help": "holm (family-wise error) or bh (Benjamini-Hochberg false discovery rate).",
            "choices": ("holm", "bh"),
        },
    )
    cases: dict[str, Thresholds] = field(
        default_factory=dict,
        metadata={
            "help": 'Case-id pattern -> its thresholds, as `[tool.optbench.gate.cases."vit_b_16-*"]` '
            "(the first matching pattern wins).",
            "key": 'cases."PATTERN"',
        },
    )
    ignore: dict[str, str] = field(
        default_factory=dict,
        metadata={
            "help": "Case-id pattern -> why its regressions are acknowledged (reported, never failing), "
            "as `[tool.optbench.gate.ignore]`.",
        },
    )

    def for_case(self, case_id: str) -> Thresholds:
        for pattern, thresholds in self.cases.items():
            if fnmatch.fnmatchcase(case_id, pattern):
                return thresholds
        return self.thresholds

    def ignored(self, case_id: str) -> str | None:
        for pattern, why in self.ignore.items():
            if fnmatch.fnmatchcase(case_id, pattern):
                return why
        return None


_NAMES: dict[str, Field[Any]] = {f.name: f for f in fields(Thresholds)}
_OTHERS: dict[str, Field[Any]] = {f.name: f for f in fields(GateConfig) if f.name != "thresholds"}


def _check(key: str, value: Any, where: str) -> float | int:
    """A threshold's value, or its one-line error."""
    declared = _NAMES[key].metadata
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise UsageProblem(f"{where}: {key} must be a non-negative number, got {value!r}")
    if declared["between"] and not 0 < value < 1:
        raise UsageProblem(f"{where}: {key} must be between 0 and 1, got {value!r}")
    return int(value) if declared["whole"] else float(value)


def _thresholds(table: dict[str, Any], base: Thresholds, where: str) -> Thresholds:
    changes: dict[str, Any] = {}
    for key, value in table.items():
        if key not in _NAMES:
            raise UsageProblem(f"{where}: unknown key {key!r}; valid keys: {', '.join(_NAMES)}")
        changes[key] = _check(key, value, where)
    return replace(base, **changes)


def _choice(table: dict[str, Any], key: str, where: str) -> Any:
    declared = _OTHERS[key]
    value = table.get(key, declared.default)
    choices = declared.metadata["choices"]
    if value not in choices:
        raise UsageProblem(f"{where}: {key} must be {' or '.join(map(repr, choices))}, got {value!r}")
    return value


def parse_gate_config(table: dict[str, Any], where: str = "[tool.optbench.gate]") -> GateConfig:
    """The gate's configuration from its TOML table; a bad key or value is one line naming it."""
    if not isinstance(table, dict):
        raise UsageProblem(f"{where} must be a table")
    plain = {k: v for k, v in table.items() if k not in _OTHERS}
    thresholds = _thresholds(plain, Thresholds(), where)
    correction = _choice(table, "correction", where)
    cases = table.get("cases", {})
    ignore = table.get("ignore", {})
    if not isinstance(cases, dict) or not all(isinstance(v, dict) for v in cases.values()):
        raise UsageProblem(f"{where}.cases must map case-id patterns to tables of thresholds")
    if not isinstance(ignore, dict) or not all(isinstance(v, str) and v.strip() for v in ignore.values()):
        raise UsageProblem(f"{where}.ignore must map case-id patterns to the reason they are acknowledged")
    return GateConfig(
        thresholds=thresholds,
        correction=correction,
        cases={p: _thresholds(t, thresholds, f'{where}.cases."{p}"') for p, t in cases.items()},
        ignore=dict(ignore),
    )


def load_gate_config(pyproject: Path | None, must_exist: bool = False) -> GateConfig:
    """`[tool.optbench.gate]` of this pyproject.toml (defaults when it has none, or when there is no
    such file and `must_exist` is false: a file named by the user, `--config`, must exist)."""
    if pyproject is None or not pyproject.is_file():
        if must_exist:
            raise UsageProblem(f"--config {pyproject}: no such file")
        return GateConfig()
    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        data = tomllib.loads(pyproject.read_text())
    except (OSError, ValueError) as error:
        raise UsageProblem(f"could not read {pyproject}: {error}") from None
    table = data.get("tool", {}).get("optbench", {}).get("gate")
    return GateConfig() if table is None else parse_gate_config(table, f"[tool.optbench.gate] in {pyproject}")


def _type_words(declared: Field[Any]) -> str:
    meta = declared.metadata
    if "choices" in meta:
        return " or ".join(f"`{c}`" for c in meta["choices"])
    if "whole" not in meta:
        return "table"
    return ("whole number" if meta["whole"] else "number") + (" in (0, 1)" if meta["between"] else " >= 0")


def gate_settings_markdown() -> str:
    """The `[tool.optbench.gate]` reference: a Markdown table (key, type, default, help) of every key,
    made from their declarations."""
    lines = ["| key | type | default | help |", "| --- | --- | --- | --- |"]
    for declared in (*_NAMES.values(), *_OTHERS.values()):
        key = declared.metadata.get("key", declared.name)
        default = "-" if declared.default in (None, MISSING) else f"`{declared.default}`"
        help = declared.metadata["help"].replace("|", "\\|")
        lines.append(f"| `{key}` | {_type_words(declared)} | {default} | {help} |")
    return "\n".join(lines) + "\n"
