"""The run's time left: from the last run's durations at the start, from the cases so far as it goes,
and quiet in a CI log."""

from __future__ import annotations

import optbench.pytest_plugin.eta as eta_module
from optbench.pytest_plugin.eta import Eta, earlier_durations


def test_the_estimate_starts_from_the_last_run_and_updates_from_the_cases_so_far(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(eta_module.time, "monotonic", lambda: clock[0])
    eta = Eta(["a", "b", "c"], {"a": 60.0, "b": 120.0, "c": 180.0}, interactive=True)
    assert eta.start_line() == "optbench: 3 cases, about 6 min (from the last run's durations)"
    clock[0] = 60.0
    assert eta.after("a", 60.0) == "optbench: 1 cases done in 60 s, 2 to go, about 5 min left"
    fresh = Eta(["x", "y"], {}, interactive=True)
    assert "an estimate of the time left follows the first case" in fresh.start_line()
    assert fresh.after("x", 30.0).endswith("1 to go, about 30 s left")
    assert fresh.after("y", 30.0) is None  # nothing left


def test_a_ci_log_gets_a_line_at_most_every_five_minutes(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(eta_module.time, "monotonic", lambda: clock[0])
    eta = Eta([f"c{i}" for i in range(20)], {}, interactive=False)
    shown = []
    for i in range(19):
        clock[0] += 30.0
        shown.append(eta.after(f"c{i}", 30.0))
    assert sum(1 for line in shown if line) == 1  # 570 s: one line, at 300 s


def test_the_start_estimate_skips_a_latest_whose_run_is_gone(tmp_path):
    import os

    results = tmp_path / "results"
    (results / "runs" / "older").mkdir(parents=True)
    (results / "runs" / "older" / "results.csv").write_text(
        "case_id,duration_s\nr18-eager,12.5\nr18-compile,40\n"
    )
    (results / "runs" / "empty").mkdir()  # a run stopped before its first row, newer than `older`
    os.utime(results / "runs" / "older", (1, 1))
    os.symlink("runs/deleted", results / "latest")  # its run folder was removed
    assert earlier_durations(results) == {"r18-eager": 12.5, "r18-compile": 40.0}
    (results / "runs" / "older" / "results.csv").unlink()
    assert earlier_durations(results) == {}
