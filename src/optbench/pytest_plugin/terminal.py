"""The run's table at the end of the terminal output (display only: the files are written before)."""

from __future__ import annotations

from typing import Any

import pytest

from optbench.pytest_plugin.stash import STATE_KEY as _STATE_KEY


@pytest.hookimpl(trylast=True)  # after pytest-benchmark's tables, so ours is the last thing shown
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_STATE_KEY, {}) if hasattr(config, "stash") else {}
    run = state.get("run")
    if run is None or not run.rows:
        return
    import pandas as pd

    from optbench.report.summary import run_summary

    terminalreporter.write_sep("=", "optbench: speedup vs eager fp32 (median latency ms)")
    frame = pd.DataFrame(run.rows)
    terminalreporter.write_line(run_summary(frame))
    terminalreporter.write_line("")
    from optbench.report.claims import claims_table

    terminalreporter.write_line("")
    terminalreporter.write_line(claims_table(frame).rstrip("\n"))
    terminalreporter.write_line("")
    terminalreporter.write_line(f"full table: {state['run_dir'] / 'results.csv'}  ({len(run.rows)} rows)")
    terminalreporter.write_line(f"claims: {state['run_dir'] / 'claims.md'}")
    if state.get("lock_warning"):
        terminalreporter.write_line(state["lock_warning"], yellow=True)
    if state.get("gate_error"):
        terminalreporter.write_line("")
        terminalreporter.write_line(state["gate_error"], red=True)
    if state.get("gate"):
        terminalreporter.write_line("")
        terminalreporter.write_line(state["gate"].rstrip("\n"))
        terminalreporter.write_line(f"gate: {state['run_dir'] / 'gate.md'}, {state['run_dir'] / 'gate.json'}")
