"""The pytest plugin: options, profiles, the matrix, fixtures, results files and the summary table.

Registered through the `pytest11` entry point, so any repository with optbench installed can write
thin benchmark tests that ask for `optbench_case` and hand it to `optbench_run`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from optbench.ab.worktree import MEMO_TREE_ENV
from optbench.errors import UnknownNameError, UsageProblem
from optbench.matrix.profiles import get_profile

# The plugin's hooks of other concerns, found by pluggy through these names (a thin hub, like
# pytest-benchmark's): the end-of-run gate and claims, and the terminal table.
from optbench.pytest_plugin.gating import pytest_sessionfinish  # noqa: F401
from optbench.pytest_plugin.options import DEVICES, add_options, option_values, results_dir, selection
from optbench.pytest_plugin.run_folder import (
    _cases,
    _keep_shard,
    _new_run_id,
    _point_latest,
    _take_machine,
    _write_manifest,
)
from optbench.pytest_plugin.stash import ERROR_KEY as _ERROR_KEY
from optbench.pytest_plugin.stash import STATE_KEY as _STATE_KEY
from optbench.pytest_plugin.terminal import pytest_terminal_summary  # noqa: F401
from optbench.results.schema import Status

_FAMILIES = (
    "baseline",
    "precision",
    "layout",
    "compile",
    "quantization",
    "pruning",
    "training",
    "data",
    "stack",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def _wants_benchmarks(config: pytest.Config) -> bool:
    """True when any optbench option was given, or the paths pytest will collect hold a benchmark
    test: then every value is checked before the session starts, so a bad one is one line, never
    a collection error with a traceback."""
    try:
        group = config._parser.getgroup("optbench")  # private, but the only list of our options
    except AttributeError:
        return True  # validate up front anyway: only costs importing torch
    if any(config.getoption(o.dest) != o.default for o in group.options):
        return True
    return _holds_benchmark_tests([Path(str(a).split("::")[0]) for a in config.args])


def _holds_benchmark_tests(paths: list[Path], limit: int = 2000) -> bool:
    """Whether a test file under `paths` asks for the `optbench_case` fixture (a text search over at
    most `limit` files: cheap next to importing torch, which only then is needed). Virtual
    environments and hidden folders are not searched."""
    seen = 0
    for path in paths:
        files = [path] if path.is_file() else path.rglob("*.py") if path.is_dir() else []
        for file in files:
            inside = file.relative_to(path).parts if file != path else ()
            if any(part.startswith(".") or part in ("site-packages", "node_modules") for part in inside):
                continue
            seen += 1
            if seen > limit:
                # Too big to search: validate lazily instead (an error then surfaces after
                # collection, still as one line), so an unrelated test suite is never failed here.
                return False
            name = file.name
            if not (name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"):
                continue
            try:
                if "optbench_case" in file.read_text(errors="ignore"):
                    return True
            except OSError:
                continue
    return False


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "optbench(mode, models=None, batch_sizes=None): an optbench benchmark test; mode is inference, "
        "training or data; models and batch_sizes (a tuple, or a dict per profile) are its defaults "
        "when --models and --batch-sizes are not given",
    )
    for family in _FAMILIES:
        config.addinivalue_line(
            "markers", f"{family}: optbench cases of the {family} technique family or stacks"
        )
    for device in DEVICES:
        config.addinivalue_line("markers", f"{device}: optbench cases on the {device} device")
    # torch.compile's structured trace logger logs at DEBUG on every compile; pytest captures it and
    # printed hundreds of empty "DEBUG torch.__trace" lines under each failed compiled case.
    logging.getLogger("torch.__trace").propagate = False
    from optbench.pytest_plugin.project_config import APPLIED, apply_project_config

    try:
        config.stash[APPLIED] = apply_project_config(config)
    except UsageProblem as error:
        raise pytest.UsageError(str(error)) from None
    # Validate names up front so a typo is a usage error, not a collection error. Without optbench
    # options nothing is loaded here: plain `pytest tests/` does not pay for importing torch.
    if _wants_benchmarks(config):
        config.stash[_STATE_KEY] = {"selection": selection(config)}
    else:
        try:
            get_profile(config.getoption("profile"))
        except UnknownNameError as error:
            raise pytest.UsageError(str(error)) from None


def _plugin_state(config: pytest.Config) -> dict[str, Any]:
    if _STATE_KEY not in config.stash:
        config.stash[_STATE_KEY] = {"selection": selection(config)}
    return config.stash[_STATE_KEY]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "optbench_case" not in metafunc.fixturenames:
        return
    from optbench.matrix.case import build_matrix

    marker = metafunc.definition.get_closest_marker("optbench")
    mode = (marker.kwargs.get("mode") if marker else None) or "inference"
    try:
        chosen = _plugin_state(metafunc.config)["selection"]
    except pytest.UsageError as error:
        # Raised here it would be a collection error with a traceback: raise it once collection ends,
        # where pytest shows a usage error as one line (exit code 4).
        metafunc.config.stash[_ERROR_KEY] = error
        metafunc.parametrize("optbench_case", [])
        return
    if marker is not None:
        chosen = chosen.for_test(marker.kwargs.get("models"), marker.kwargs.get("batch_sizes"))
    cases = build_matrix(chosen, mode)
    params = [pytest.param(c, id=c.id, marks=_marks(c)) for c in cases]
    metafunc.parametrize("optbench_case", params)


def _marks(case: Any) -> list[pytest.MarkDecorator]:
    """The device's marker, each technique family's, and `stack` for a stack (`-m "not compile"`
    also drops stacks that compile)."""
    names = [case.device, *case.families] + (["stack"] if "+" in case.technique else [])
    return [getattr(pytest.mark, name) for name in names]


@pytest.hookimpl(trylast=True)  # after -k and -m deselect: the shard plan and run.json see what runs
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    if _ERROR_KEY in config.stash:
        raise config.stash[_ERROR_KEY]
    if _STATE_KEY not in config.stash:
        return
    if not any("optbench_case" in getattr(item, "fixturenames", ()) for item in items):
        return
    shard = config.stash[_STATE_KEY]["selection"].shard
    if shard is not None:
        _keep_shard(config, items, shard)
    if config.option.collectonly:
        return
    from optbench.measure.ceilings import Ceilings
    from optbench.measure.data import PipelineConfig
    from optbench.pytest_plugin.runner import RunState
    from optbench.results import ResultsWriter

    state = config.stash[_STATE_KEY]
    profile = get_profile(state["selection"].profile)
    results = results_dir(config)
    run_id = config.getoption("run_id") or _new_run_id()
    run_dir = results / "runs" / run_id
    try:
        writer = ResultsWriter(run_dir)
    except UsageProblem as error:
        raise pytest.UsageError(str(error)) from None
    from optbench.pytest_plugin.eta import earlier_durations

    state["earlier_durations"] = earlier_durations(results)  # before latest points at this run
    _point_latest(results, run_dir)
    from optbench.catalog.weights import WeightsProvider

    capture = config.pluginmanager.getplugin("capturemanager")
    option = option_values(config, profile)  # the profile's own where an option was left unset
    state["malloc"] = _apply_malloc(config, option["malloc"])  # the one applied, for run.json
    state["run"] = RunState(
        run_id=run_id,
        writer=writer,
        weights=WeightsProvider(
            option["weights"],
            data_dir=Path(option["data_dir"]) if option["data_dir"] else None,
            # Training progress bars must reach the terminal through pytest's output capture.
            progress_context=capture.global_and_fixture_disabled if capture is not None else None,
            image_task=profile.image_task,
        ),
        accuracy_floor=option["accuracy_floor"],
        floor_points=option["accuracy_floor_points"],
        record_only=option["record_accuracy_only"],
        eval_limit=option["eval_samples"],
        calibration_samples=option["calibration_samples"],
        converge_steps=option["converge_steps"],
        pipeline=PipelineConfig(
            images=option["pipeline_images"],
            crop=option["pipeline_crop"],
            data_dir=Path(option["pipeline_data"]) if option["pipeline_data"] else None,
            block_batches=profile.pipeline_block_batches,
        ),
        timing=profile.timing.with_overrides(option["time_budget"], option["target_precision"]),
        timing_shape=option["timing_shape"],
        call_timeout_s=option["call_timeout"],
        ceilings=Ceilings(),
        repo_dir=str(config.rootpath),
        memo=_memo(config, option),
        memo_tree=os.environ.get(MEMO_TREE_ENV) or None,
    )
    state["run_dir"] = run_dir
    _write_manifest(config, state, run_id, run_dir, items)
    _take_machine(config, state, run_id, option["wait_for_machine"])
    _start_eta(state, items)
    # pytest-benchmark's own JSON goes beside our tables unless the user asked for it elsewhere.
    bench_session = getattr(config, "_benchmarksession", None)
    if bench_session is not None and not getattr(bench_session, "json", None):
        bench_session.json = run_dir / "benchmark.json"


def _memo(config: pytest.Config, option: dict[str, Any]) -> Any:
    """Where evaluations and short trainings are reused from, or None: --fresh-evaluations, and a
    gated run (its second look must measure the candidate's own accuracy) unless `optbench ab` named
    the exact code this session runs (MEMO_TREE_ENV, then in every key)."""
    from optbench.catalog.checkpoints import cache_dir
    from optbench.measure.memo import Memo

    if option["fresh_evaluations"]:
        return None
    if config.getoption("optbench_compare", None) and not os.environ.get(MEMO_TREE_ENV):
        return None
    return Memo(cache_dir())


def _warn_weak_model(row: dict[str, Any], warned: set[str]) -> None:
    """Once per run and model: its trained weights stopped below their recipe's target."""
    if row.get("below_target") and row["model"] not in warned:
        import warnings

        from optbench.report.summary import weak_model_warning

        warned.add(row["model"])
        warnings.warn(weak_model_warning(row["model"], row["trained_top1"], row["target_top1"]), stacklevel=1)


def _start_eta(state: dict[str, Any], items: list[pytest.Item]) -> None:
    import sys

    from optbench.pytest_plugin.eta import Eta

    cases = [case.id for case in _cases(items).values()]
    state["eta"] = eta = Eta(cases, state["earlier_durations"], sys.stderr.isatty())
    print(eta.start_line(), file=sys.stderr, flush=True)


def _show_eta(config: pytest.Config, case_id: str, seconds: float) -> None:
    import sys

    eta = config.stash[_STATE_KEY].get("eta")
    line = eta.after(case_id, seconds) if eta is not None else None
    if line:
        capture = config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            print(line, file=sys.stderr, flush=True)


def _ab_pacer(config: pytest.Config) -> Any:
    """Under `optbench ab`, the lockstep plugin's slicer for the running step (None otherwise): the
    timer pauses between slices of its rounds while the other side times the same case."""
    lockstep = config.pluginmanager.get_plugin("optbench_lockstep")
    current = getattr(lockstep, "current_slicer", None)
    return current() if callable(current) else None


@pytest.fixture
def optbench_run(request: pytest.FixtureRequest, benchmark: Any) -> Callable[[Any], dict[str, Any]]:
    """Measure a case, record its row, and turn skip and failure into pytest outcomes."""
    from optbench.pytest_plugin.runner import CaseFailed, CaseRunner, plain_timer, pytest_benchmark_timer

    state = request.config.stash[_STATE_KEY]["run"]
    warned: set[str] = request.config.stash[_STATE_KEY].setdefault("weak_models_warned", set())
    test = request.node.originalname.removeprefix("test_")

    def run(case: Any) -> dict[str, Any]:
        benchmark.group = f"{case.model} {case.device} bs{case.batch_size}"
        pacer = _ab_pacer(request.config)
        if getattr(benchmark, "disabled", False):
            time_fn = None if pacer is None else functools.partial(plain_timer, pacer=pacer)
        else:
            time_fn = pytest_benchmark_timer(benchmark, pacer)
        started = time.monotonic()
        try:
            row = CaseRunner(state).run(case, test=test, time_fn=time_fn)
        except CaseFailed:
            _show_eta(request.config, case.id, time.monotonic() - started)
            row = state.rows[-1]
            _warn_weak_model(row, warned)
            pytest.fail(f"{row['case_id']}: {row['status']}: {row['reason']}", pytrace=False)
        _warn_weak_model(row, warned)
        _show_eta(request.config, case.id, time.monotonic() - started)
        if row["status"] == Status.SKIPPED:
            pytest.skip(row["reason"])
        if row["status"] != Status.PASSED:  # an accuracy status, recorded only (--record-accuracy-only)
            import warnings

            warnings.warn(f"{row['case_id']}: {row['status']}: {row['reason']}", stacklevel=1)
        benchmark.extra_info.update(
            {
                k: row.get(k)
                for k in (
                    "model",
                    "technique",
                    "device",
                    "batch_size",
                    "input_shape",
                    "eval_input_shape",
                    "dtype",
                    "speedup",
                    "speedup_ci95_low",
                    "speedup_ci95_high",
                    "pct_of_peak",
                    "throughput",
                    "prepare_s",
                    "peak_mem_mb",
                    "size_bytes",
                )
            }
        )
        return row

    return run


def _apply_malloc(config: pytest.Config, malloc: str) -> str:
    """Fix glibc malloc's thresholds for --malloc fixed, and for auto where nothing else chose
    (catalog.allocator.auto_choice), before any model is built; the mode applied. `fixed` that
    cannot apply is refused in one line (checked in pytest_configure too); `auto` falls back."""
    from optbench.catalog.allocator import auto_choice, fix_thresholds

    asked = malloc
    if malloc == "auto":
        in_ab = config.pluginmanager.get_plugin("optbench_lockstep") is not None
        malloc, why = auto_choice(os.environ, in_ab)
        if malloc == "inherit" and not in_ab:
            print(f"optbench: malloc left as the process started it: {why}", file=sys.stderr)
    if malloc == "fixed":
        try:
            fix_thresholds()
        except RuntimeError as error:
            if asked == "fixed":
                raise pytest.UsageError(f"--malloc fixed: {error}") from None
            print(f"optbench: malloc left as the process started it: {error}", file=sys.stderr)
            return "inherit"
    return malloc


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE_KEY, {})
    run = state.get("run")
    if run is not None:
        run.writer.close()
    if state.get("lock") is not None:
        state["lock"].release()
