"""The plugin's command-line options, made from optbench.matrix.settings, and their validation into a
Selection.

Every bad value is a UsageProblem: pytest shows it as one line and exits with its usage-error code.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from optbench.errors import UsageProblem
from optbench.matrix.checks import DEVICES, RUN_ID, parse_batch_sizes
from optbench.matrix.profiles import Profile, get_profile
from optbench.matrix.setting import Setting, split
from optbench.matrix.settings import SETTINGS, check_settings, with_profile_defaults

__all__ = ["DEVICES", "RUN_ID", "add_options", "option_values", "results_dir", "selection"]

_ARGPARSE_TYPES = {"number": float, "int": int}


def _addoption_kwargs(setting: Setting) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"help": setting.full_help().replace("%", "%%")}
    if setting.kind == "bool":
        kwargs.update(action="store_true", default=setting.default)
    elif setting.kind == "paths":
        kwargs.update(action="append", default=list(setting.default))
    else:
        kwargs["default"] = setting.default
    if setting.kind in _ARGPARSE_TYPES:
        kwargs["type"] = _ARGPARSE_TYPES[setting.kind]
    if setting.metavar is not None:
        kwargs["metavar"] = setting.metavar
    return kwargs


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("optbench", "optbench benchmark matrix")
    for setting in SETTINGS:
        group.addoption(setting.flag, **_addoption_kwargs(setting))


def option_values(config: pytest.Config, profile: Profile | None = None) -> dict[str, Any]:
    """Every optbench option's value by name; with `profile`, its per-profile defaults filled in."""
    values = {setting.name: config.getoption(setting.name) for setting in SETTINGS}
    return values if profile is None else with_profile_defaults(values, profile)


def _load_registries(config: pytest.Config) -> None:
    from optbench.catalog.models import load_entry_points, load_user_dir, load_zoo
    from optbench.catalog.techniques import load_techniques

    load_techniques()
    load_zoo()
    load_entry_points()
    dirs = [
        config.rootpath / "techniques",
        config.rootpath / "models",
        *(Path(d) for d in config.getoption("models_dir")),
    ]
    for directory in dirs:
        if directory.is_dir():
            load_user_dir(directory)


def selection(config: pytest.Config) -> Any:
    """Validate the options and return the Selection; raises pytest.UsageError on a bad name."""
    try:
        values = option_values(config)
        check_settings(values)  # each option's own check, declared with it
        profile = values["profile"]
        devices = split(values["devices"])
        batch_sizes = parse_batch_sizes(values["batch_sizes"])
        shard = _shard(config)
        _check_gate(config)
        if _xdist_workers(config):
            raise UsageProblem(
                "optbench times one case at a time: pytest-xdist's -n would run cases in parallel on shared "
                "cores and make every timing meaningless; run without -n (shard the matrix instead)"
            )
        _check_outputs(config)

        _load_registries(config)
        from optbench.catalog.devices import available_devices
        from optbench.catalog.models import MODELS
        from optbench.catalog.techniques.stack import check_techniques
        from optbench.matrix.case import EVERY, Selection

        models = split(values["models"])
        techniques = split(values["techniques"])
        if models is not None:
            models = MODELS.expand(models, lambda spec: spec.tags)
        if techniques is not None and EVERY in techniques and len(techniques) > 1:
            raise UsageProblem(f"--techniques {EVERY!r} stands alone: it already selects every technique")
        if techniques is not None and techniques != [EVERY]:
            techniques = _expand_techniques(techniques)
            check_techniques(techniques)
        if models is None:
            models = _default_models(config, profile)
        if values["weights"] in ("pretrained", "own"):
            _check_weight_files(values["weights"], models)
    except UsageProblem as error:
        from optbench.pytest_plugin.project_config import APPLIED, name_the_key

        raise pytest.UsageError(name_the_key(str(error), config.stash.get(APPLIED, {}), config)) from None
    return Selection(
        models=models,
        techniques=techniques,
        devices=devices if devices is not None else available_devices(),
        batch_sizes=batch_sizes,
        profile=profile,
        models_given=values["models"] is not None,
        shard=shard,
        weights=values["weights"],
    )


def _shard(config: pytest.Config) -> Any:
    """--shard (checked with the options), else the shard the CI environment names, else None."""
    from optbench.matrix.shard import detect_shard, parse_shard

    given = config.getoption("shard")
    return parse_shard(given) if given is not None else detect_shard()


def _check_gate(config: pytest.Config) -> None:
    """--optbench-compare: the baseline read whole now (a truncated or newer-schema one must not wait for
    the run's end), and the gate's configuration in the pytest root."""
    baseline = config.getoption("optbench_compare")
    if baseline is None:
        return
    from optbench.gate.config import load_gate_config
    from optbench.results import load

    try:
        rows = load(baseline)
    except (FileNotFoundError, UsageProblem) as error:
        raise UsageProblem(f"--optbench-compare: {error}") from None
    if rows.empty:
        raise UsageProblem(f"--optbench-compare: {baseline} holds no rows: nothing to compare with")
    load_gate_config(config.rootpath / "pyproject.toml")


def _xdist_workers(config: pytest.Config) -> bool:
    """True under pytest-xdist: `-n N` / `-n auto` in the controller, or inside a worker."""
    return bool(getattr(config.option, "numprocesses", None)) or hasattr(config, "workerinput")


def _writable(path: Path) -> str | None:
    """Why `path` (a folder, made if missing) cannot be written, or None. Creates nothing."""
    if path.exists() and not path.is_dir():
        return "it is a file, not a folder"
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def results_dir(config: pytest.Config) -> Path:
    return Path(config.getoption("results_dir") or config.rootpath / "results").resolve()


def _check_outputs(config: pytest.Config) -> None:
    """Results and cache folders writable, and a run id that names a new folder inside them."""
    from optbench.catalog.checkpoints import cache_dir

    results = results_dir(config)
    problem = _writable(results)
    if problem:
        raise UsageProblem(f"--results-dir {results} cannot be written: {problem}")
    run_id = config.getoption("run_id")  # its form is checked with the option
    if run_id is not None and (results / "runs" / run_id).exists() and not config.option.collectonly:
        raise UsageProblem(
            f"run {run_id!r} already exists in {results / 'runs'}; nothing is overwritten: pick "
            "another --run-id, or leave it out for a new one"
        )
    problem = _writable(cache_dir())
    if problem:
        raise UsageProblem(
            f"the cache folder {cache_dir()} cannot be written: {problem} (set OPTBENCH_CACHE to "
            "another folder)"
        )


def in_optbench_repository(config: pytest.Config) -> bool:
    """True when pytest runs in optbench's own checkout (its models/ folder is the zoo)."""
    from optbench.catalog.models import zoo_dir

    return zoo_dir() == (config.rootpath / "models").resolve()


def _default_models(config: pytest.Config, profile: str) -> list[str]:
    """The profile's models: in a user's repository the user's own (and installed plugins'), with the
    zoo only when asked for (--zoo); in optbench's repository, the zoo."""
    from optbench.catalog.models import MODELS, is_zoo_model

    zoo = config.getoption("zoo")
    with_zoo = in_optbench_repository(config) if zoo is None else zoo
    chosen = get_profile(profile)

    def joins(name: str) -> bool:  # the user's own models always; the zoo's where the profile takes them
        return not is_zoo_model(name) or (with_zoo and (chosen.zoo is None or name in chosen.zoo))

    models = [s.name for s in MODELS if s.in_profile(chosen.batch_key) and joins(s.name)]
    if not models:
        raise UsageProblem(
            f"no models to benchmark in the {profile} profile: {config.rootpath / 'models'} registers none; "
            "add a model file there, name zoo models with --models (e.g. --models resnet18), or add --zoo"
        )
    return models


def _expand_techniques(items: list[str]) -> list[str]:
    """Wildcards ('*autocast') and family tags ('tag:precision') -> technique names; stacks and plain
    names pass through (check_techniques validates them)."""
    from optbench.catalog.registry import is_pattern
    from optbench.catalog.techniques import TECHNIQUES
    from optbench.catalog.techniques.stack import SEPARATOR

    names: list[str] = []
    for item in items:
        found = (
            TECHNIQUES.expand([item], lambda tech: {tech.family})
            if SEPARATOR not in item and is_pattern(item)
            else [item]
        )
        names += [n for n in found if n not in names]
    return names


def _check_weight_files(choice: str, models: list[str]) -> None:
    """Pretrained weights must already be in the torch hub cache (offline), and a file a model's
    spec names for --weights own must exist: say which file, where."""
    from optbench.catalog.models import MODELS
    from optbench.catalog.own_weights import check_own_weights_file
    from optbench.catalog.weights import pretrained_preprocess, pretrained_weights_file

    for name in models:
        spec = MODELS.get(name)
        if choice == "own":
            check_own_weights_file(spec)  # a spec without weights is a skipped case, not an error
        elif pretrained_preprocess(spec) is not None:  # none at all: a skipped case with its reason
            pretrained_weights_file(spec, must_exist=True)
