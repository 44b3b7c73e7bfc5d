"""Gate thresholds from `[tool.optbench.gate]` in pyproject.toml, with per-metric defaults, per-case
overrides (shell patterns on case ids) and an ignore list that needs no code change."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from optbench.errors import UsageProblem


@dataclass(frozen=True)
class Thresholds:
    latency_pct: float = 10.0
    """A latency change smaller than this many percent is never a regression, however significant."""
    ab_latency_pct: float = 5.0
    """The same for `optbench ab`, where base and head are timed in alternating slices of one case and
    the paired ratios are tighter than two separate runs' samples (see the README's gate figures)."""
    alpha: float = 0.01
    """Family-wise significance level after correcting for the number of latency comparisons."""
    accuracy_drop: float = 0.005
    """Held-out top-1 may drop this much (absolute: 0.005 is half a point) before it is a regression."""
    size_pct: float = 1.0
    """Model size (compressed bytes) may grow this many percent."""
    memory_pct: float = 10.0
    """Peak memory may grow this many percent (compared on the same machine only)."""
    fail_on_improvement_pct: float | None = None
    """Fail when latency improves by more than this (the baseline is stale: refresh it)."""
    min_samples: int = 5
    """Fewer raw samples than this on either side: not_comparable."""


@dataclass(frozen=True)
class GateConfig:
    thresholds: Thresholds = field(default_factory=Thresholds)
    correction: str = "holm"
    """holm (family-wise error) or bh (Benjamini-Hochberg false discovery rate)."""
    cases: dict[str, Thresholds] = field(default_factory=dict)
    """Case-id pattern -> its thresholds (the first matching pattern wins)."""
    ignore: dict[str, str] = field(default_factory=dict)
    """Case-id pattern -> why its regressions are acknowledged (reported, never failing)."""

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


_NAMES = {f.name: f for f in fields(Thresholds)}


def _thresholds(table: dict[str, Any], base: Thresholds, where: str) -> Thresholds:
    changes: dict[str, Any] = {}
    for key, value in table.items():
        if key not in _NAMES:
            raise UsageProblem(f"{where}: unknown key {key!r}; valid keys: {', '.join(_NAMES)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise UsageProblem(f"{where}: {key} must be a non-negative number, got {value!r}")
        if key == "alpha" and not 0 < value < 1:
            raise UsageProblem(f"{where}: alpha must be between 0 and 1, got {value!r}")
        changes[key] = int(value) if key == "min_samples" else float(value)
    return replace(base, **changes)


def parse_gate_config(table: dict[str, Any], where: str = "[tool.optbench.gate]") -> GateConfig:
    """The gate's configuration from its TOML table; a bad key or value is one line naming it."""
    if not isinstance(table, dict):
        raise UsageProblem(f"{where} must be a table")
    plain = {k: v for k, v in table.items() if k not in ("cases", "ignore", "correction")}
    thresholds = _thresholds(plain, Thresholds(), where)
    correction = table.get("correction", "holm")
    if correction not in ("holm", "bh"):
        raise UsageProblem(f"{where}: correction must be 'holm' or 'bh', got {correction!r}")
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
