"""The plugin's command-line options and their validation into a Selection.

Every bad value is a UsageProblem: pytest shows it as one line and exits with its usage-error code.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from optbench.catalog.models import check_shape
from optbench.errors import UnknownNameError, UsageProblem
from optbench.matrix.profiles import PROFILES, get_profile

DEVICES = ("cpu", "cuda", "mps")


CALIBRATION_DEFAULT = 256
CALIBRATION_RANGE = (1, 10_000)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("optbench", "optbench benchmark matrix")
    group.addoption(
        "--models",
        default=None,
        help="comma-separated model names, wildcards ('resnet*') or tags ('tag:cnn') (default: the "
        "profile's models)",
    )
    group.addoption(
        "--techniques",
        default=None,
        help="comma-separated technique names, wildcards ('*autocast') or families ('tag:precision'); "
        "join names with '+' to stack them, e.g. "
        "channels_last+bf16_autocast+compile (default: all, plus each device's default stacks)",
    )
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
        "--calibration-samples",
        type=int,
        default=CALIBRATION_DEFAULT,
        metavar="N",
        help=f"training samples static int8 quantization calibrates on, {CALIBRATION_RANGE[0]} to "
        f"{CALIBRATION_RANGE[1]} (default {CALIBRATION_DEFAULT}; capped at the train split's size)",
    )
    group.addoption(
        "--converge-steps",
        type=int,
        default=None,
        metavar="N",
        help="training cases: optimizer steps of the short seeded training that fills the convergence "
        "columns, 0 for none (default: the profile's)",
    )
    group.addoption(
        "--pipeline-data",
        default=None,
        metavar="DIR",
        help="data-pipeline cases read your ImageFolder tree DIR/<class>/<image> instead of the "
        "generated JPEGs",
    )
    group.addoption(
        "--pipeline-images",
        type=int,
        default=None,
        metavar="N",
        help="JPEGs in the generated data-pipeline dataset (default: the profile's)",
    )
    group.addoption(
        "--pipeline-crop",
        type=int,
        default=PIPELINE_CROP,
        metavar="PIXELS",
        help=f"side of the training crop the data pipeline produces (default {PIPELINE_CROP})",
    )
    group.addoption(
        "--shard",
        default=None,
        metavar="K/N",
        help="run part K of N of the matrix (1 <= K <= N); each group of cases sharing an eager "
        "baseline stays on one shard. Default: from OPTBENCH_SHARD, a Kubernetes Indexed Job "
        "(JOB_COMPLETION_INDEX with OPTBENCH_SHARD_COUNT), a Slurm array or GitLab's CI_NODE_INDEX",
    )
    group.addoption(
        "--shard-durations",
        default=None,
        metavar="RUN",
        help="balance shards by the case durations of an earlier run (a run folder or results file)",
    )
    group.addoption(
        "--optbench-compare",
        default=None,
        metavar="BASELINE",
        help="gate this run against a baseline (results/baselines/NAME or a run folder) when it ends: "
        "gate.md and gate.json in the run folder, exit status 1 on a regression",
    )
    group.addoption(
        "--gate-confirm-budget",
        type=float,
        default=600.0,
        metavar="S",
        help="with --optbench-compare: seconds to spend measuring the latency regressions again before "
        "failing; one not seen again is reported as unconfirmed and does not fail (0: no second look; "
        "default 600)",
    )
    group.addoption(
        "--record-accuracy-only",
        action="store_true",
        help="record fail_accuracy, nan_output and nondeterministic_baseline without failing the test",
    )
    group.addoption(
        "--zoo",
        action="store_true",
        default=None,
        help="include optbench's zoo in the default models (the default inside the optbench repository; "
        "in your own, the default is your models only)",
    )
    group.addoption(
        "--timing-shape",
        default="deploy",
        help="deploy: time each model at its deployment shape (3x224x224, 128 tokens ...) with the "
        "evaluated weights; task: at the shape it trains and is evaluated at. Default: deploy",
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
        profile = get_profile(config.getoption("profile")).name
        devices = _split(config.getoption("devices"))
        if devices is not None:
            unknown = [d for d in devices if d not in DEVICES]
            if unknown:
                raise UnknownNameError(
                    f"unknown device {', '.join(map(repr, unknown))}; valid devices: {', '.join(DEVICES)}"
                )
        batch_sizes = _parse_batch_sizes(config.getoption("batch_sizes"))
        from optbench.catalog.weights import WEIGHT_CHOICES

        check_shape(config.getoption("timing_shape"))
        if config.getoption("weights") not in WEIGHT_CHOICES:
            raise UnknownNameError(
                f"unknown weights {config.getoption('weights')!r}; valid weights: {', '.join(WEIGHT_CHOICES)}"
            )
        if config.getoption("eval_samples") is not None and config.getoption("eval_samples") < 1:
            raise UsageProblem("--eval-samples takes a positive whole number")
        calibration = config.getoption("calibration_samples")
        if not CALIBRATION_RANGE[0] <= calibration <= CALIBRATION_RANGE[1]:
            raise UsageProblem(
                f"--calibration-samples takes a whole number from {CALIBRATION_RANGE[0]} to "
                f"{CALIBRATION_RANGE[1]}, got {calibration}"
            )
        _check_training_and_pipeline(config)
        shard = _shard(config)
        _check_gate(config)
        if not 0 < config.getoption("accuracy_floor") <= 1:
            raise UsageProblem("--accuracy-floor takes a fraction in (0, 1], e.g. 0.99")
        if config.getoption("data_dir") is not None:
            from optbench.catalog.tasks.imagefolder import check_data_dir

            check_data_dir(Path(config.getoption("data_dir")))
        _check_timing(config)
        _check_outputs(config)
        for directory in config.getoption("models_dir"):
            if not Path(directory).is_dir():
                raise UnknownNameError(f"--models-dir {directory!r} is not a folder")

        _load_registries(config)
        from optbench.catalog.devices import available_devices
        from optbench.catalog.models import MODELS
        from optbench.catalog.techniques.stack import check_techniques
        from optbench.matrix.case import Selection

        models = _split(config.getoption("models"))
        techniques = _split(config.getoption("techniques"))
        if models is not None:
            models = MODELS.expand(models, lambda spec: spec.tags)
        if techniques is not None:
            techniques = _expand_techniques(techniques)
            check_techniques(techniques)
        if models is None:
            models = _default_models(config, profile)
        if config.getoption("weights") == "pretrained":
            _check_pretrained(models)
    except UsageProblem as error:
        from optbench.pytest_plugin.project_config import APPLIED, name_the_key

        raise pytest.UsageError(name_the_key(str(error), config.stash.get(APPLIED, {}), config)) from None
    return Selection(
        models=models,
        techniques=techniques,
        devices=devices if devices is not None else available_devices(),
        batch_sizes=batch_sizes,
        profile=profile,
        models_given=config.getoption("models") is not None,
        shard=shard,
        weights=config.getoption("weights"),
    )


def _shard(config: pytest.Config) -> Any:
    from optbench.matrix.shard import detect_shard, parse_shard

    given = config.getoption("shard")
    shard = parse_shard(given) if given is not None else detect_shard()
    durations = config.getoption("shard_durations")
    if durations is not None:
        from optbench.results import resolve

        try:
            resolve(durations)
        except FileNotFoundError as error:
            raise UsageProblem(f"--shard-durations: {error}") from None
    return shard


def _check_gate(config: pytest.Config) -> None:
    baseline = config.getoption("optbench_compare")
    if baseline is None:
        return
    from optbench.gate.config import load_gate_config
    from optbench.results import load

    try:  # read it whole now: a truncated or newer-schema baseline must not wait for the run's end
        rows = load(baseline)
    except (FileNotFoundError, UsageProblem) as error:
        raise UsageProblem(f"--optbench-compare: {error}") from None
    if rows.empty:
        raise UsageProblem(f"--optbench-compare: {baseline} holds no rows: nothing to compare with")
    load_gate_config(config.rootpath / "pyproject.toml")
    if config.getoption("gate_confirm_budget") < 0:
        raise UsageProblem(
            f"--gate-confirm-budget takes seconds >= 0, got {config.getoption('gate_confirm_budget')}"
        )


PIPELINE_CROP = 128
"""Small enough that the default sweep's training steps fit 5 minutes on 2 cores; 224 for ImageNet's."""


def _check_training_and_pipeline(config: pytest.Config) -> None:
    steps = config.getoption("converge_steps")
    if steps is not None and not 0 <= steps <= 100_000:
        raise UsageProblem(f"--converge-steps takes a whole number from 0 to 100000, got {steps}")
    images = config.getoption("pipeline_images")
    if images is not None and not 1 <= images <= 1_000_000:
        raise UsageProblem(f"--pipeline-images takes a whole number from 1 to 1000000, got {images}")
    if not 16 <= config.getoption("pipeline_crop") <= 2048:
        raise UsageProblem(
            f"--pipeline-crop takes a side in pixels from 16 to 2048, got {config.getoption('pipeline_crop')}"
        )
    if config.getoption("pipeline_data") is not None:
        from optbench.catalog.tasks.jpeg_folder import check_image_folder

        check_image_folder(Path(config.getoption("pipeline_data")))


RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")  # "+" as in stack names


def _check_timing(config: pytest.Config) -> None:
    budget, precision = config.getoption("time_budget"), config.getoption("target_precision")
    if budget is not None and not budget > 0:
        raise UsageProblem(f"--time-budget takes a positive number of seconds, got {budget:g}")
    if precision is not None and not 0 < precision < 1:
        raise UsageProblem(f"--target-precision takes a fraction in (0, 1), e.g. 0.02, got {precision:g}")
    if _xdist_workers(config):
        raise UsageProblem(
            "optbench times one case at a time: pytest-xdist's -n would run cases in parallel on shared "
            "cores and make every timing meaningless; run without -n (shard the matrix instead)"
        )


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
    run_id = config.getoption("run_id")
    if run_id is not None:
        if not RUN_ID.fullmatch(run_id) or run_id in (".", ".."):
            raise UsageProblem(
                f"--run-id {run_id!r} may hold only letters, digits, '.', '_', '+' and '-' (it names a folder "
                "in <results>/runs)"
            )
        if (results / "runs" / run_id).exists() and not config.option.collectonly:
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
    models = [s.name for s in MODELS if s.in_profile(profile) and (with_zoo or not is_zoo_model(s.name))]
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


def _check_pretrained(models: list[str]) -> None:
    """Offline, pretrained weights must already be in the torch hub cache: say which file, where."""
    from optbench.catalog.models import MODELS
    from optbench.catalog.weights import pretrained_preprocess, pretrained_weights_file

    for name in models:
        spec = MODELS.get(name)
        if pretrained_preprocess(spec) is None:
            continue  # no pretrained weights at all: a skipped case with its reason, not an error
        pretrained_weights_file(spec, must_exist=True)


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
