"""The time a run has left: an estimate at the start (from the last run's durations of the same cases,
when there is one) and after cases as it goes. Live on a terminal; in a CI log at most every 5 min."""

from __future__ import annotations

import time
from pathlib import Path

QUIET_S = 300.0
"""Not on a terminal (CI): a line at most this often."""


def earlier_durations(results: Path) -> dict[str, float]:
    """case id -> seconds in the newest earlier run under `results`: `latest`, or where it cannot be
    read (its run deleted, or stopped before its first row) the newest run folder that can ({} with
    none)."""
    from optbench.results import load

    runs = results / "runs"
    folders = sorted(
        (p for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else [],
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for candidate in (results / "latest", *folders):
        try:
            frame = load(candidate)
        except Exception:  # gone, or a run this optbench cannot read: try the next newest
            continue
        frame = frame[frame["duration_s"].notna()]
        if len(frame):
            return {str(c): float(d) for c, d in zip(frame["case_id"], frame["duration_s"], strict=True)}
    return {}


class Eta:
    def __init__(self, cases: list[str], earlier: dict[str, float], interactive: bool) -> None:
        self.left = list(dict.fromkeys(cases))
        self.earlier = earlier
        self.interactive = interactive
        self.taken: list[float] = []
        self.started = time.monotonic()
        self.last_shown = self.started

    def _estimate(self) -> float | None:
        known = [self.earlier[c] for c in self.left if c in self.earlier]
        unknown = len(self.left) - len(known)
        per_case = self.taken or list(self.earlier.values())
        if unknown and not per_case:
            return None
        return sum(known) + unknown * (sum(per_case) / len(per_case) if per_case else 0.0)

    def start_line(self) -> str:
        estimate = self._estimate()
        if estimate is None:
            return f"optbench: {len(self.left)} cases; an estimate of the time left follows the first case"
        source = "the last run's durations" if self.earlier else "the cases so far"
        return f"optbench: {len(self.left)} cases, about {_minutes(estimate)} (from {source})"

    def after(self, case_id: str, seconds: float) -> str | None:
        """A line after `case_id` finished in `seconds`, or None when it is not time for one."""
        if case_id in self.left:
            self.left.remove(case_id)
        self.taken.append(seconds)
        now = time.monotonic()
        if not self.left or (not self.interactive and now - self.last_shown < QUIET_S):
            return None
        self.last_shown = now
        estimate = self._estimate()
        done = _minutes(now - self.started)
        left = f", about {_minutes(estimate)} left" if estimate is not None else ""
        return f"optbench: {len(self.taken)} cases done in {done}, {len(self.left)} to go{left}"


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"
