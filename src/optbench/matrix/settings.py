"""Every option of `pytest bench/`, declared once.

Each `Setting` below is one option. From the table come the pytest option (pytest_plugin/options.py
loops over it), its `[tool.optbench]` key and type check (pytest_plugin/project_config.py), its
one-line usage errors (`check_settings`), whether run.json records it (`MANIFEST_OPTIONS`), its
per-profile default (`with_profile_defaults`) and its row in the options reference (`settings_markdown`). Adding
an option is one more `Setting`; an option with unusual validation carries a small `check`
(optbench.matrix.checks).

No pytest and no torch here: the docs build reads this table with neither installed. A check that
needs the catalog imports it when it runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from optbench.matrix.checks import (
    DEVICES,
    check_batch_sizes,
    check_data_folder,
    check_earlier_run,
    check_folders,
    check_jpeg_folder,
    check_malloc,
    check_run_id,
    check_shard,
    check_timing_shape,
    check_weights,
)
from optbench.matrix.profiles import PROFILES, Profile
from optbench.matrix.setting import Range, Setting, markdown_table, profile_value

WHOLE_NUMBER = "{flag} takes a whole number from {low} to {high}, got {value}"

SETTINGS: tuple[Setting, ...] = (
    # The order is that of the valid keys an unknown [tool.optbench] key lists, and of the docs.
    Setting(
        "profile", "str", "run size", "selection", default="default", choices=tuple(PROFILES), noun="profile"
    ),
    Setting(
        "models",
        "list",
        "comma-separated model names, wildcards ('resnet*') or tags ('tag:cnn')",
        "selection",
        default_text="the profile's models",
    ),
    Setting(
        "techniques",
        "list",
        "comma-separated technique names, wildcards ('*autocast') or families ('tag:precision'); join "
        "names with '+' to stack them, e.g. channels_last+bf16_autocast+compile; 'all': every technique "
        "and each device's default stacks, whatever the profile",
        "selection",
        default_text="the profile's own list (full: every technique and default stack)",
    ),
    Setting(
        "devices",
        "list",
        "comma-separated devices",
        "selection",
        default_text="those present",
        choices=DEVICES,
        noun="device",
    ),
    Setting(
        "batch_sizes",
        "list",
        "comma-separated batch sizes",
        "selection",
        default_text="each model's for the profile",
        check=check_batch_sizes,
    ),
    Setting(
        "weights",
        "str",
        "random | trained (on the embedded task, or --data-dir; cached) | pretrained (torchvision, from "
        "the local torch hub cache only) | own (the file or loader a model's spec names as weights=; "
        "models without are skipped)",
        "weights and accuracy",
        default="trained",
        check=check_weights,
    ),
    Setting(
        "data_dir",
        "path",
        "evaluate (and train) on your data: image models on an ImageFolder tree DIR/<class>/<image> (or "
        "DIR/train/... and DIR/val/...), text models on DIR/eval.jsonl (and DIR/train.jsonl), one "
        '{"tokens": [ids], "label": k} a line',
        "weights and accuracy",
        check=check_data_folder,
        in_manifest=True,
        metavar="DIR",
    ),
    Setting(
        "models_dir",
        "paths",
        "a folder of model files to register (repeatable; <rootdir>/models and <rootdir>/techniques "
        "are always read)",
        "selection",
        default=(),
        check=check_folders,
        metavar="DIR",
    ),
    Setting(
        "results_dir",
        "path",
        "where runs are written",
        "output",
        default_text="<rootdir>/results",
        metavar="DIR",
    ),
    Setting(
        "run_id",
        "str",
        "name of this run's folder",
        "output",
        default_text="UTC time and a random suffix",
        check=check_run_id,
        toml=False,
    ),
    Setting(
        "time_budget",
        "number",
        "seconds of timing per case",
        "timing",
        profile_default="timing.budget_s",
        range=Range(0, error="{flag} takes a positive number of seconds, got {value:g}", open_low=True),
        in_manifest=True,
        metavar="SECONDS",
    ),
    Setting(
        "call_timeout",
        "number",
        "seconds one call of a case may take: a case past it stops after that call and is a timeout row",
        "timing",
        profile_default="call_timeout_s",
        range=Range(0, error="{flag} takes a positive number of seconds, got {value:g}", open_low=True),
        in_manifest=True,
        metavar="SECONDS",
    ),
    Setting(
        "wait_for_machine",
        "bool",
        "when another optbench run is timing on this machine (a lock in the cache folder), wait for it "
        "instead of warning and going on",
        "timing",
        default=False,
    ),
    Setting(
        "malloc",
        "str",
        "glibc malloc's thresholds for this run: fixed (mmap and trim thresholds fixed before any model "
        "is built, so the process cannot settle into a slow regime of its own; docs/harness-honesty.md), "
        "inherit (as the process started: glibc's adaptive ones unless MALLOC_* variables or a preloaded "
        "allocator say otherwise) or auto (fixed, unless the environment sets the thresholds, preloads "
        "another allocator or runs another C library, or optbench ab started the run). run.json records "
        "the one applied and the allocator variables",
        "timing",
        default="auto",
        choices=("auto", "fixed", "inherit"),
        noun="malloc mode",
        check=check_malloc,
        in_manifest=True,
    ),
    Setting(
        "target_precision",
        "number",
        "aim for the median's 95% CI within this fraction of it",
        "timing",
        profile_default="timing.target_rel_ci",
        range=Range(
            0,
            1,
            "{flag} takes a fraction in {range}, e.g. 0.02, got {value:g}",
            open_low=True,
            open_high=True,
        ),
        in_manifest=True,
        metavar="FRACTION",
    ),
    Setting(
        "accuracy_floor",
        "number",
        "fail_accuracy below this fraction of the fp32 top-1",
        "weights and accuracy",
        default=0.99,
        range=Range(0, 1, "{flag} takes a fraction in {range}, e.g. 0.99", open_low=True),
        in_manifest=True,
        metavar="FRACTION",
    ),
    Setting(
        "accuracy_floor_points",
        "number",
        "the floor as an absolute drop of top-1 in points (1.0: at most one point below fp32); replaces "
        "--accuracy-floor",
        "weights and accuracy",
        range=Range(0, 100, "{flag} takes points from 0 to 100, got {value:g}"),
        in_manifest=True,
        metavar="POINTS",
    ),
    Setting(
        "eval_samples",
        "int",
        "evaluate on the first N held-out samples only; fewer is faster but makes the accuracy floor coarser",
        "weights and accuracy",
        default_text="all",
        range=Range(1, error="{flag} takes a positive whole number"),
        in_manifest=True,
        metavar="N",
    ),
    Setting(
        "fresh_evaluations",
        "bool",
        "evaluate every case and redo every short training, instead of reusing the results an earlier "
        "run left in the cache folder with the same code, weights, technique, inputs and machine. "
        "Reuse is also off for a gated run (--optbench-compare) and in optbench ab's sessions. Turn it "
        "on after changing a file your model or technique reads that is not its own source",
        "weights and accuracy",
        default=False,
        in_manifest=True,
    ),
    Setting(
        "record_accuracy_only",
        "bool",
        "record fail_accuracy, nan_output and nondeterministic_baseline without failing the test",
        "weights and accuracy",
        default=False,
        in_manifest=True,
    ),
    Setting(
        "timing_shape",
        "str",
        "deploy: time each model at its deployment shape (3x224x224, 128 tokens ...) with the evaluated "
        "weights; task: at the shape it trains and is evaluated at",
        "timing",
        default="deploy",
        check=check_timing_shape,
        in_manifest=True,
    ),
    Setting(
        "zoo",
        "bool",
        "include optbench's zoo in the default models",
        "selection",
        default_text="on inside the optbench repository; in your own, your models only",
    ),
    Setting(
        "calibration_samples",
        "int",
        "training samples static int8 quantization calibrates on (capped at the train split's size)",
        "weights and accuracy",
        default=256,
        range=Range(1, 10_000, WHOLE_NUMBER),
        in_manifest=True,
        metavar="N",
    ),
    Setting(
        "converge_steps",
        "int",
        "training cases: optimizer steps of the short seeded training that fills the convergence "
        "columns, 0 for none",
        "training and data",
        profile_default="converge_steps",
        range=Range(0, 100_000, WHOLE_NUMBER),
        in_manifest=True,
        metavar="N",
    ),
    Setting(
        "pipeline_data",
        "path",
        "data-pipeline cases read your ImageFolder tree DIR/<class>/<image> instead of the generated JPEGs",
        "training and data",
        check=check_jpeg_folder,
        in_manifest=True,
        metavar="DIR",
    ),
    Setting(
        "pipeline_images",
        "int",
        "JPEGs in the generated data-pipeline dataset",
        "training and data",
        profile_default="pipeline_images",
        range=Range(1, 1_000_000, WHOLE_NUMBER),
        in_manifest=True,
        metavar="N",
    ),
    Setting(
        "pipeline_crop",
        "int",
        "side of the training crop the data pipeline produces",
        "training and data",
        # Small enough that the default sweep's training steps fit 5 minutes on 2 cores; 224 for ImageNet's.
        default=128,
        range=Range(16, 2048, "{flag} takes a side in pixels from {low} to {high}, got {value}"),
        in_manifest=True,
        metavar="PIXELS",
    ),
    Setting(
        "shard",
        "str",
        "run part K of N of the matrix (1 <= K <= N); each group of cases sharing an eager baseline "
        "stays on one shard",
        "sharding",
        default_text="from OPTBENCH_SHARD, a Kubernetes Indexed Job (JOB_COMPLETION_INDEX with "
        "OPTBENCH_SHARD_COUNT), a Slurm array or GitLab's CI_NODE_INDEX",
        check=check_shard,
        toml=False,
        metavar="K/N",
    ),
    Setting(
        "shard_durations",
        "path",
        "balance shards by the case durations of an earlier run (a run folder or results file)",
        "sharding",
        check=check_earlier_run,
        toml=False,
        metavar="RUN",
    ),
    Setting(
        "optbench_compare",
        "path",
        "gate this run against a baseline (results/baselines/NAME or a run folder) when it ends: gate.md "
        "and gate.json in the run folder, exit status 1 on a regression",
        "gate",
        toml=False,  # checked by the plugin: the gate's configuration is in the pytest root
        metavar="BASELINE",
    ),
    Setting(
        "gate_confirm_budget",
        "number",
        "with --optbench-compare: seconds to spend measuring the latency regressions again before "
        "failing; one not seen again is reported as unconfirmed and does not fail (0: no second look)",
        "gate",
        default=600.0,
        range=Range(0, error="{flag} takes seconds >= 0, got {value}"),
        only_with="optbench_compare",
        toml=False,
        metavar="S",
    ),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
MANIFEST_OPTIONS: tuple[str, ...] = tuple(s.name for s in SETTINGS if s.in_manifest)
"""The options run.json records (with the selection), in the table's order."""


def check_settings(values: Mapping[str, Any]) -> None:
    """Every option's own check, in the table's order: the first bad value's one-line usage error."""
    for setting in SETTINGS:
        if setting.only_with is not None and values.get(setting.only_with) is None:
            continue
        setting.validate(values.get(setting.name))


def with_profile_defaults(values: Mapping[str, Any], profile: Profile) -> dict[str, Any]:
    """The options' values with each per-profile default filled in from `profile`."""
    resolved = dict(values)
    for setting in SETTINGS:
        if setting.profile_default is not None and resolved.get(setting.name) is None:
            resolved[setting.name] = profile_value(profile, setting.profile_default)
    return resolved


def settings_markdown(group: str | None = None) -> str:
    """The options reference: a Markdown table (flag, [tool.optbench] key, type, default, help) of every
    option, or of one `group`'s."""
    return markdown_table(s for s in SETTINGS if group is None or s.group == group)
