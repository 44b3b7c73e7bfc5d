"""At the end of a run: its claims file, and `--optbench-compare`, the gate on the finished run."""

from __future__ import annotations

from typing import Any

import pytest

from optbench.errors import UsageProblem
from optbench.pytest_plugin.run_folder import _cases
from optbench.pytest_plugin.stash import STATE_KEY as _STATE_KEY


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The run's claims file; then --optbench-compare: gate the finished run against the baseline, and
    a regression fails the session."""
    config = session.config
    state = config.stash.get(_STATE_KEY, {}) if hasattr(config, "stash") else {}
    baseline = config.getoption("optbench_compare", None)
    run = state.get("run")
    if run is not None and run.rows:
        import pandas as pd

        from optbench.report.claims import claims_markdown

        (state["run_dir"] / "claims.md").write_text(claims_markdown(pd.DataFrame(run.rows)), encoding="utf-8")
    if baseline is None or run is None or not run.rows:
        return
    from optbench.gate.config import load_gate_config
    from optbench.gate.render import markdown, timing_differences, verdicts_json
    from optbench.gate.verdicts import (
        apply_confirmation,
        asked_for,
        compare,
        failed,
        nothing_gated,
        to_confirm,
    )
    from optbench.results import load, refuse_impossible
    from optbench.results.manifest import manifest_near

    try:  # the baseline was read when the run started; it may have changed since
        base, head = refuse_impossible(load(baseline), baseline), load(state["run_dir"])
        gate_config = load_gate_config(config.rootpath / "pyproject.toml")
    except (FileNotFoundError, UsageProblem) as error:
        _gate_input_error(session, state, str(error))
        return
    manifests = manifest_near(baseline), manifest_near(state["run_dir"])
    asked = asked_for(*manifests)
    verdicts = compare(base, head, gate_config, asked)
    empty = nothing_gated(verdicts)
    if empty:  # never a pass: the run's rows stay, the gate says why it could not judge
        _gate_input_error(session, state, empty)
        return
    order = to_confirm(verdicts)
    budget = config.getoption("gate_confirm_budget", 0.0) or 0.0
    if order and budget > 0:
        from optbench.pytest_plugin.remeasure import remeasure

        cases = {
            case.id: (case, item.originalname.removeprefix("test_"))
            for item, case in _cases(session.items).items()
        }
        folder, measured = remeasure(run, cases, order, state["run_dir"], budget)
        if measured:
            apply_confirmation(verdicts, compare(base, load(folder), gate_config), measured)
    text = markdown(verdicts, base, head, timing_differences(*manifests))
    (state["run_dir"] / "gate.md").write_text(text, encoding="utf-8")
    (state["run_dir"] / "gate.json").write_text(verdicts_json(verdicts), encoding="utf-8")
    state["gate"] = text
    if failed(verdicts) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _gate_input_error(session: pytest.Session, state: dict[str, Any], message: str) -> None:
    """--optbench-compare could not judge the run: one line at the end, pytest's usage-error code."""
    state["gate_error"] = f"optbench gate: error: --optbench-compare: {message}"
    session.exitstatus = pytest.ExitCode.USAGE_ERROR
