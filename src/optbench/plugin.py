"""The pytest plugin: options, profiles, the matrix, fixtures, results files and the summary table.

Registered through the `pytest11` entry point, so any repository with optbench installed can write
thin benchmark tests that ask for `optbench_case` and hand it to `optbench_run`.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from optbench.profiles import PROFILES, get_profile
from optbench.registry import UnknownNameError, UsageProblem

_STATE_KEY = pytest.StashKey["Any"]()
_FAMILIES = ("baseline", "precision", "layout", "compile", "quantization", "pruning", "training", "data")
_DEVICES = ("cpu", "cuda", "mps")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("optbench", "optbench benchmark matrix")
    group.addoption(
        "--models", default=None, help="comma-separated model names (default: the profile's models)"
    )
    group.addoption("--techniques", default=None, help="comma-separated technique names (default: all)")
    group.addoption(
        "--devices", default=None, help="comma-separated devices: cpu, cuda, mps (default: those present)"
    )
    group.addoption(
        "--batch-sizes",
        default=None,
        help="comma-separated batch sizes (default: each model's for the profile)",
    )
    group.addoption(
        "--profile", default="default", help=f"run size: {', '.join(PROFILES)} (default: default)"
    )
    group.addoption(
        "--models-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder of model files to register (repeatable; <rootdir>/models and "
        "<rootdir>/techniques are always read)",
    )
    group.addoption(
        "--results-dir",
        default=None,
        metavar="DIR",
        help="where runs are written (default: <rootdir>/results)",
    )
    group.addoption(
        "--run-id", default=None, help="name of this run's folder (default: UTC time and a random suffix)"
    )
    group.addoption(
        "--time-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds of timing per case (default: the profile's)",
    )
    group.addoption(
        "--weights",
        default="trained",
        help="random | trained (on the embedded task, or --data-dir; cached) | pretrained (torchvision, "
        "from the local torch hub cache only). Default: trained",
    )
    group.addoption(
        "--data-dir",
        default=None,
        metavar="DIR",
        help="evaluate (and train) image models on your ImageFolder data: DIR/<class>/<image>, "
        "or DIR/train/... and DIR/val/...",
    )
    group.addoption(
        "--accuracy-floor",
        type=float,
        default=0.99,
        metavar="FRACTION",
        help="fail_accuracy below this fraction of the fp32 top-1 (default 0.99)",
    )
    group.addoption(
        "--eval-samples",
        type=int,
        default=None,
        metavar="N",
        help="evaluate on the first N held-out samples only (default: all; fewer is faster but "
        "makes the accuracy floor coarser)",
    )
    group.addoption(
        "--record-accuracy-only",
        action="store_true",
        help="record fail_accuracy, nan_output and nondeterministic_baseline without failing the test",
    )
    group.addoption(
        "--target-precision",
        type=float,
        default=None,
        metavar="FRACTION",
        help="aim for the median's 95%% CI within this fraction of it (default: the profile's)",
    )


def _split(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


def _load_registries(config: pytest.Config) -> None:
    from optbench.modelspec import load_user_dir, load_zoo
    from optbench.techniques import load_techniques

    load_techniques()
    load_zoo()
    dirs = [
        config.rootpath / "techniques",
        config.rootpath / "models",
        *(Path(d) for d in config.getoption("models_dir")),
    ]
    for directory in dirs:
        if directory.is_dir():
            load_user_dir(directory)


def _selection(config: pytest.Config) -> Any:
    """Validate the options and return the Selection; raises pytest.UsageError on a bad name."""
    try:
        profile = get_profile(config.getoption("profile")).name
        devices = _split(config.getoption("devices"))
        if devices is not None:
            unknown = [d for d in devices if d not in _DEVICES]
            if unknown:
                raise UnknownNameError(
                    f"unknown device {', '.join(map(repr, unknown))}; valid devices: {', '.join(_DEVICES)}"
                )
        batch_sizes = _parse_batch_sizes(config.getoption("batch_sizes"))
        from optbench.weights import WEIGHT_CHOICES

        if config.getoption("weights") not in WEIGHT_CHOICES:
            raise UnknownNameError(
                f"unknown weights {config.getoption('weights')!r}; valid weights: {', '.join(WEIGHT_CHOICES)}"
            )
        if config.getoption("eval_samples") is not None and config.getoption("eval_samples") < 1:
            raise UsageProblem("--eval-samples takes a positive whole number")
        if not 0 < config.getoption("accuracy_floor") <= 1:
            raise UsageProblem("--accuracy-floor takes a fraction in (0, 1], e.g. 0.99")
        if config.getoption("data_dir") is not None:
            from optbench.tasks.imagefolder import check_data_dir

            check_data_dir(Path(config.getoption("data_dir")))
        for directory in config.getoption("models_dir"):
            if not Path(directory).is_dir():
                raise UnknownNameError(f"--models-dir {directory!r} is not a folder")

        _load_registries(config)
        from optbench.case import Selection
        from optbench.devices import available_devices
        from optbench.modelspec import MODELS
        from optbench.techniques import TECHNIQUES

        models = _split(config.getoption("models"))
        techniques = _split(config.getoption("techniques"))
        if models is not None:
            MODELS.check(models)
        if techniques is not None:
            TECHNIQUES.check(techniques)
        models = models if models is not None else [s.name for s in MODELS if s.in_profile(profile)]
        if config.getoption("weights") == "pretrained":
            _check_pretrained(models)
    except UsageProblem as error:
        raise pytest.UsageError(str(error)) from None
    return Selection(
        models=models,
        techniques=techniques if techniques is not None else TECHNIQUES.names(),
        devices=devices if devices is not None else available_devices(),
        batch_sizes=batch_sizes,
        profile=profile,
    )


def _check_pretrained(models: list[str]) -> None:
    """Offline, pretrained weights must already be in the torch hub cache: say which file, where."""
    from optbench.modelspec import MODELS
    from optbench.weights import pretrained_weights_file

    for name in models:
        _, file = pretrained_weights_file(MODELS.get(name))
        if not file.exists():
            raise UsageProblem(
                f"--weights pretrained: {name} needs {file.name} in {file.parent} (nothing is downloaded; "
                "copy the file there, or use --weights trained)"
            )


def _parse_batch_sizes(value: str | None) -> list[int] | None:
    items = _split(value)
    if items is None:
        return None
    try:
        sizes = [int(v) for v in items]
    except ValueError:
        sizes = []
    if not sizes or any(s < 1 for s in sizes):
        raise UnknownNameError(
            f"--batch-sizes takes positive whole numbers separated by commas, got {value!r}"
        )
    return sizes


def _wants_benchmarks(config: pytest.Config) -> bool:
    """True when any optbench option was given: then its values are checked before collection."""
    try:
        group = config._parser.getgroup("optbench")  # private, but the only list of our options
    except AttributeError:
        return True  # validate up front anyway: only costs importing torch
    return any(config.getoption(o.dest) != o.default for o in group.options)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "optbench(mode): an optbench benchmark test; mode is inference or training"
    )
    for family in _FAMILIES:
        config.addinivalue_line("markers", f"{family}: optbench cases of the {family} technique family")
    for device in _DEVICES:
        config.addinivalue_line("markers", f"{device}: optbench cases on the {device} device")
    # Validate names up front so a typo is a usage error, not a collection error. Without optbench
    # options nothing is loaded here: plain `pytest tests/` does not pay for importing torch.
    if _wants_benchmarks(config):
        config.stash[_STATE_KEY] = {"selection": _selection(config)}
    else:
        try:
            get_profile(config.getoption("profile"))
        except UnknownNameError as error:
            raise pytest.UsageError(str(error)) from None


def _plugin_state(config: pytest.Config) -> dict[str, Any]:
    if _STATE_KEY not in config.stash:
        config.stash[_STATE_KEY] = {"selection": _selection(config)}
    return config.stash[_STATE_KEY]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "optbench_case" not in metafunc.fixturenames:
        return
    from optbench.case import build_matrix

    marker = metafunc.definition.get_closest_marker("optbench")
    mode = (marker.kwargs.get("mode") if marker else None) or "inference"
    cases = build_matrix(_plugin_state(metafunc.config)["selection"], mode)
    params = [
        pytest.param(c, id=c.id, marks=[getattr(pytest.mark, c.device), getattr(pytest.mark, c.tech.family)])
        for c in cases
    ]
    metafunc.parametrize("optbench_case", params)


def _new_run_id() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def _point_latest(results_dir: Path, run_dir: Path) -> None:
    latest = results_dir / "latest"
    tmp = results_dir / f".latest-{os.getpid()}"
    try:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(run_dir.relative_to(results_dir), target_is_directory=True)
        os.replace(tmp, latest)  # atomic: a reader never sees latest missing
    except OSError:
        # No symlinks (some Windows setups): name the run in a file instead.
        (results_dir / "LATEST").write_text(run_dir.name + "\n")


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    if config.option.collectonly or _STATE_KEY not in config.stash:
        return
    if not any("optbench_case" in getattr(item, "fixturenames", ()) for item in items):
        return
    from optbench.results import ResultsWriter
    from optbench.runner import RunState

    state = config.stash[_STATE_KEY]
    profile = get_profile(state["selection"].profile)
    results_dir = Path(config.getoption("results_dir") or config.rootpath / "results").resolve()
    run_id = config.getoption("run_id") or _new_run_id()
    run_dir = results_dir / "runs" / run_id
    writer = ResultsWriter(run_dir)
    _point_latest(results_dir, run_dir)
    from optbench.weights import WeightsProvider

    capture = config.pluginmanager.getplugin("capturemanager")
    data_dir = config.getoption("data_dir")
    state["run"] = RunState(
        run_id=run_id,
        writer=writer,
        weights=WeightsProvider(
            config.getoption("weights"),
            data_dir=Path(data_dir) if data_dir else None,
            # Training progress bars must reach the terminal through pytest's output capture.
            progress_context=capture.global_and_fixture_disabled if capture is not None else None,
        ),
        accuracy_floor=config.getoption("accuracy_floor"),
        record_only=config.getoption("record_accuracy_only"),
        eval_limit=config.getoption("eval_samples"),
        timing=profile.timing.with_overrides(
            config.getoption("time_budget"), config.getoption("target_precision")
        ),
        repo_dir=str(config.rootpath),
    )
    state["run_dir"] = run_dir
    # pytest-benchmark's own JSON goes beside our tables unless the user asked for it elsewhere.
    bench_session = getattr(config, "_benchmarksession", None)
    if bench_session is not None and not getattr(bench_session, "json", None):
        bench_session.json = run_dir / "benchmark.json"


@pytest.fixture
def optbench_run(request: pytest.FixtureRequest, benchmark: Any) -> Callable[[Any], dict[str, Any]]:
    """Measure a case, record its row, and turn skip and failure into pytest outcomes."""
    from optbench.runner import CaseFailed, CaseRunner, pytest_benchmark_timer

    state = request.config.stash[_STATE_KEY]["run"]
    test = request.node.originalname.removeprefix("test_")

    def run(case: Any) -> dict[str, Any]:
        benchmark.group = f"{case.model} {case.device} bs{case.batch_size}"
        time_fn = None if getattr(benchmark, "disabled", False) else pytest_benchmark_timer(benchmark)
        try:
            row = CaseRunner(state).run(case, test=test, time_fn=time_fn)
        except CaseFailed:
            row = state.rows[-1]
            pytest.fail(f"{row['case_id']}: {row['status']}: {row['reason']}", pytrace=False)
        if row["status"] == "skipped":
            pytest.skip(row["reason"])
        if row["status"] != "passed":  # an accuracy status, recorded only (--record-accuracy-only)
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
                    "dtype",
                    "speedup",
                    "throughput",
                    "prepare_s",
                    "peak_mem_mb",
                    "size_bytes",
                )
            }
        )
        return row

    return run


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.stash.get(_STATE_KEY, {}).get("run")
    if run is not None:
        run.writer.close()


@pytest.hookimpl(trylast=True)  # after pytest-benchmark's tables, so ours is the last thing shown
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_STATE_KEY, {}) if hasattr(config, "stash") else {}
    run = state.get("run")
    if run is None or not run.rows:
        return
    import pandas as pd

    from optbench.summary import comparison_table, skip_reasons

    frame = pd.DataFrame(run.rows)
    terminalreporter.write_sep("=", "optbench: speedup vs eager fp32 (median latency ms)")
    terminalreporter.write_line(comparison_table(frame))
    reasons = skip_reasons(frame)
    if reasons:
        terminalreporter.write_line("")
        terminalreporter.write_line(reasons)
    terminalreporter.write_line("")
    terminalreporter.write_line(f"full table: {state['run_dir'] / 'results.csv'}  ({len(run.rows)} rows)")
