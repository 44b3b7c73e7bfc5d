from dataclasses import replace

import pytest

from optbench.matrix.case import Case, Selection, build_matrix


def _select(**kw):
    base = dict(
        models=["resnet18"],
        techniques=["eager", "bf16_autocast"],
        devices=["cpu"],
        batch_sizes=None,
        profile="smoke",
    )
    base.update(kw)
    return Selection(**base)


def test_ids_are_readable_and_baseline_comes_first_in_each_group(registries):
    cases = build_matrix(
        _select(
            models=["resnet18", "lstm_classifier"], techniques=["bf16_autocast", "eager"], batch_sizes=[1, 4]
        ),
        "inference",
    )
    assert [c.id for c in cases] == [
        "resnet18-eager-cpu-bs1",
        "resnet18-bf16_autocast-cpu-bs1",
        "resnet18-eager-cpu-bs4",
        "resnet18-bf16_autocast-cpu-bs4",
        "lstm_classifier-eager-cpu-bs1",
        "lstm_classifier-bf16_autocast-cpu-bs1",
        "lstm_classifier-eager-cpu-bs4",
        "lstm_classifier-bf16_autocast-cpu-bs4",
    ]
    assert all(c.skip_reason is None for c in cases)
    assert Case("resnet18", "compile", "cpu", 8, "training").id == "resnet18-compile-cpu-bs8-training"


def test_profile_batch_sizes_and_explicit_models_outside_the_profile(registries):
    assert [c.batch_size for c in build_matrix(_select(techniques=["eager"]), "inference")] == [2]
    # resnet50 is not in the smoke profile: named explicitly it runs at its default batch size.
    assert [
        c.batch_size for c in build_matrix(_select(models=["resnet50"], techniques=["eager"]), "inference")
    ] == [8]


def test_unsupported_cases_stay_in_the_matrix_with_a_reason(registries):
    import torch

    cases = {
        c.id: c
        for c in build_matrix(
            _select(
                models=["resnet18", "lstm_classifier"],
                techniques=["eager", "channels_last", "fp16_autocast"],
                devices=["cpu", "cuda"],
            ),
            "inference",
        )
    }
    assert len(cases) == 2 * 3 * 2
    assert (
        cases["lstm_classifier-channels_last-cpu-bs4"].skip_reason
        == "channels_last applies to 4-D image inputs only"
    )
    assert "does not run on cpu" in cases["resnet18-fp16_autocast-cpu-bs2"].skip_reason
    assert cases["resnet18-eager-cpu-bs2"].skip_reason is None
    if not torch.cuda.is_available():
        assert "cuda is not available" in cases["resnet18-eager-cuda-bs2"].skip_reason
    else:
        assert cases["resnet18-fp16_autocast-cuda-bs2"].skip_reason is None


def test_training_mode_is_not_claimed_by_inference_only_techniques(registries):
    (case,) = build_matrix(_select(techniques=["int8_static_fx"]), "training")
    assert case.skip_reason == "int8_static_fx has no training mode (modes: inference)"
    (trains,) = build_matrix(_select(techniques=["bf16_autocast"]), "training")
    assert trains.skip_reason is None


def test_default_matrix_of_each_mode_holds_only_techniques_of_that_mode(registries):
    from optbench.catalog.techniques import resolve

    for mode in ("inference", "training", "data"):
        cases = build_matrix(_select(techniques=["all"]), mode)
        assert cases and all(mode in resolve(c.technique).modes for c in cases), mode
    names = {c.technique for c in build_matrix(_select(techniques=["all"]), "data")}
    # persistent_workers and prefetch_<N> need workers: in stacks only, never alone
    assert "persistent_workers" not in names and any(n.endswith("+persistent_workers") for n in names)


def test_the_gate_profile_is_every_family_in_each_mode_on_smokes_models(registries):
    from optbench.matrix.profiles import PROFILES

    gate = PROFILES["gate"]
    assert gate.timing == PROFILES["smoke"].timing and gate.image_task == PROFILES["smoke"].image_task
    select = _select(models=["resnet18", "lstm_classifier"], techniques=None, profile="gate")
    cases = {mode: build_matrix(select, mode) for mode in ("inference", "training", "data")}
    inference = {c.technique for c in cases["inference"]}
    # every inference family, and the CPU's default stack rather than CUDA's
    families = {f for c in cases["inference"] for f in c.families}
    assert {"baseline", "layout", "precision", "compile", "quantization", "pruning"} <= families
    assert "channels_last+bf16_autocast" in inference and "channels_last+fp16_autocast" not in inference
    assert {c.technique for c in cases["training"]} == {
        "eager", "bf16_autocast", "fp16_autocast", "activation_checkpoint", "grad_accum_2"
    }  # fmt: skip
    assert {c.technique for c in cases["data"]} == {"eager", "pin_memory", "workers_2+persistent_workers"}
    # smoke's batch size for resnet18 (2); the LSTM names its own for the gate (32, not smoke's 4)
    assert {(c.model, c.batch_size) for c in cases["inference"]} == {("resnet18", 2), ("lstm_classifier", 32)}
    smoke = build_matrix(replace(select, profile="smoke"), "inference")
    assert {(c.model, c.batch_size) for c in smoke} == {("resnet18", 2), ("lstm_classifier", 4)}
    assert sum(map(len, cases.values())) == 2 * 10 + 2 * 5 + 2 * 3  # bench/ feeds the loader resnet18 only
    on_cuda = {c.technique for c in build_matrix(replace(select, devices=["cuda"]), "inference")}
    assert "channels_last+fp16_autocast" in on_cuda and "channels_last+bf16_autocast" not in on_cuda


def test_smoke_runs_the_gates_techniques_with_one_preparation_and_all_runs_every_one(registries):
    from optbench.catalog.techniques import default_techniques
    from optbench.matrix.profiles import PROFILES

    smoke = PROFILES["smoke"]
    assert smoke.techniques == PROFILES["gate"].techniques and smoke.timing.max_preparations == 1
    assert PROFILES["default"].timing.max_preparations is None  # the default run prepares twice
    select = _select(models=["resnet18"], techniques=None)
    for mode in ("inference", "training", "data"):
        listed = {c.technique for c in build_matrix(select, mode)}
        assert listed == set(smoke.techniques[mode]) - {"channels_last+fp16_autocast"}  # CUDA's stack
        # 'all' is every registered technique and the device's default stacks, whatever the profile
        every = {c.technique for c in build_matrix(replace(select, techniques=["all"]), mode)}
        assert every == set(default_techniques("cpu", mode)) and len(every) > len(listed)


def test_the_default_profile_keeps_every_family_in_each_mode_on_one_model_of_each_kind(registries):
    from optbench.catalog.techniques import default_techniques
    from optbench.matrix.profiles import PROFILES

    default = PROFILES["default"]
    assert default.zoo == (
        "lstm_classifier",
        "bert_mini_encoder",
        "resnet18",
        "mobilenet_v3_large",
        "vit_ti_16",
    )
    select = _select(models=list(default.zoo), techniques=None, profile="default")
    cases = {mode: build_matrix(select, mode) for mode in ("inference", "training", "data")}
    run = {mode: [c for c in found if c.skip_reason is None] for mode, found in cases.items()}
    families = {f for c in run["inference"] for f in c.families}
    assert families == {"baseline", "layout", "precision", "compile", "quantization", "pruning"}
    assert {c.technique for c in run["training"] if c.model == "resnet18"} == {
        "eager", "bf16_autocast", "activation_checkpoint", "grad_accum_2"
    }  # fmt: skip
    assert {f for c in run["data"] for f in c.families} == {"baseline", "data"}
    by_model = {m: {c.technique for c in run["inference"] if c.model == m} for m in default.zoo}
    # A stack of the profile's own (not one of the devices' default stacks) runs where its parts apply.
    assert {"prune_l1_50+int8_dynamic", "prune_l1_50+linear_csr", "torchao_int8_dynamic"} <= by_model[
        "lstm_classifier"
    ]
    assert {"prune_channels_30+int8_static_fx", "channels_last+bf16_autocast+compile"} <= by_model["resnet18"]
    assert "channels_last+fp16_autocast+compile" not in {c.technique for c in cases["inference"]}
    on_cuda = {c.technique for c in build_matrix(replace(select, devices=["cuda"]), "inference")}
    assert {"channels_last+fp16_autocast+compile", "sparse_2to4"} <= on_cuda
    assert "channels_last+bf16_autocast+compile" not in on_cuda
    # Every technique the default profile names is one `full` runs, or a stack of them.
    every = set(default_techniques("cpu")) | set(default_techniques("cuda"))
    named = {part for t in default.techniques["inference"] for part in t.split("+")}
    assert named <= every
    # Each zoo model at its default batch size; the profile's own timing.
    assert {(c.model, c.batch_size) for c in cases["inference"]} == {
        ("lstm_classifier", 32), ("bert_mini_encoder", 8), ("resnet18", 8), ("mobilenet_v3_large", 8),
        ("vit_ti_16", 8),
    }  # fmt: skip
    assert len(run["inference"]) < 60 and PROFILES["full"].techniques is None


# The table of options (optbench.matrix.settings): each option declared once, and every place that
# needs it made from that declaration.


class _AddOption:
    """Stands in for pytest's parser: records what add_options asks for."""

    def __init__(self):
        self.options = {}

    def getgroup(self, *args, **kwargs):
        return self

    def addoption(self, *names, **kwargs):
        (flag,) = names
        self.options[flag] = kwargs


def test_every_option_is_declared_once_and_each_place_is_made_from_it():
    from optbench.matrix.settings import MANIFEST_OPTIONS, SETTINGS, settings_markdown
    from optbench.pytest_plugin.options import add_options
    from optbench.pytest_plugin.project_config import KEYS

    parser = _AddOption()
    add_options(parser)
    assert list(parser.options) == [s.flag for s in SETTINGS]
    assert len({s.name for s in SETTINGS}) == len(SETTINGS)
    for s in SETTINGS:
        kwargs = parser.options[s.flag]
        assert kwargs["default"] == (list(s.default) if s.kind == "paths" else s.default), s.flag
        assert kwargs.get("type") == {"number": float, "int": int}.get(s.kind), s.flag
        assert (kwargs.get("action") == "store_true") == (s.kind == "bool"), s.flag
    assert parser.options["--models-dir"]["action"] == "append"
    assert parser.options["--calibration-samples"]["default"] == 256
    assert parser.options["--profile"]["default"] == "default"
    assert parser.options["--zoo"]["default"] is None  # unset: the repository decides
    # [tool.optbench]: every option but those naming one run's folders, baseline or shard.
    assert list(KEYS) == [s.name for s in SETTINGS if s.toml_key is not None]
    assert list(KEYS)[:5] == ["profile", "models", "techniques", "devices", "batch_sizes"]
    assert set(parser.options) - {"--" + k.replace("_", "-") for k in KEYS} == {
        "--run-id",
        "--shard",
        "--shard-durations",
        "--optbench-compare",
        "--gate-confirm-budget",
    }
    assert KEYS["models_dir"] == "paths" and KEYS["time_budget"] == "number" and KEYS["zoo"] == "bool"
    # run.json: the options that change what a row measures.
    assert set(MANIFEST_OPTIONS) == {
        "timing_shape", "time_budget", "target_precision", "eval_samples", "accuracy_floor",
        "calibration_samples", "converge_steps", "pipeline_data", "pipeline_images", "pipeline_crop",
        "data_dir", "record_accuracy_only", "call_timeout", "accuracy_floor_points", "malloc",
        "fresh_evaluations",
    }  # fmt: skip
    # The docs: one row per option, in the table's order; a group's own table.
    rows = settings_markdown().splitlines()
    assert rows[0] == "| flag | [tool.optbench] key | type | default | help |"
    assert [row.split("`")[1].split()[0] for row in rows[2:]] == [s.flag for s in SETTINGS]
    table = settings_markdown()
    assert "| `--calibration-samples N` | `calibration_samples` | int, 1 to 10000 | `256` |" in table
    assert (
        "| `--time-budget SECONDS` | `time_budget` | number, > 0 | the profile's: smoke 1, default 5" in table
    )
    assert "| `--run-id` | - |" in table
    training = settings_markdown(group="training and data").splitlines()[2:]
    assert [row.split("`")[1].split()[0] for row in training] == [
        "--converge-steps",
        "--pipeline-data",
        "--pipeline-images",
        "--pipeline-crop",
    ]
    assert "random \\| trained" in table and "DIR/&lt;class>" in table


def _defaults(**changes):
    from optbench.matrix.settings import SETTINGS

    values = {s.name: list(s.default) if s.kind == "paths" else s.default for s in SETTINGS}
    return {**values, **changes}


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"profile": "huge"}, "unknown profile 'huge'; valid profiles: smoke, default, full"),
        ({"devices": "cpu,tpu"}, "unknown device 'tpu'; valid devices: cpu, cuda, mps"),
        ({"batch_sizes": "4,0"}, "--batch-sizes takes positive whole numbers separated by commas, got '4,0'"),
        ({"weights": "best"}, "unknown weights 'best'; valid weights: random, trained, pretrained"),
        ({"timing_shape": "bogus"}, "unknown timing shape 'bogus'; valid timing shapes: deploy, task"),
        ({"data_dir": "/no/such/dir"}, "--data-dir /no/such/dir does not exist"),
        ({"models_dir": ["/no/such/dir"]}, "--models-dir '/no/such/dir' is not a folder"),
        (
            {"run_id": "../escape"},
            "--run-id '../escape' may hold only letters, digits, '.', '_', '+' and '-' (it names a folder "
            "in <results>/runs)",
        ),
        ({"time_budget": 0.0}, "--time-budget takes a positive number of seconds, got 0"),
        ({"time_budget": float("nan")}, "--time-budget takes a positive number of seconds, got nan"),
        ({"target_precision": -1.0}, "--target-precision takes a fraction in (0, 1), e.g. 0.02, got -1"),
        ({"target_precision": 1.0}, "--target-precision takes a fraction in (0, 1), e.g. 0.02, got 1"),
        ({"accuracy_floor": 2.0}, "--accuracy-floor takes a fraction in (0, 1], e.g. 0.99"),
        ({"eval_samples": 0}, "--eval-samples takes a positive whole number"),
        ({"calibration_samples": 0}, "--calibration-samples takes a whole number from 1 to 10000, got 0"),
        ({"converge_steps": -3}, "--converge-steps takes a whole number from 0 to 100000, got -3"),
        ({"pipeline_data": "/no/such/dir"}, "--pipeline-data /no/such/dir does not exist"),
        ({"pipeline_images": 0}, "--pipeline-images takes a whole number from 1 to 1000000, got 0"),
        ({"pipeline_crop": 8}, "--pipeline-crop takes a side in pixels from 16 to 2048, got 8"),
        ({"shard": "4/3"}, "--shard takes K/N with 1 <= K <= N, got '4/3'"),
        ({"shard_durations": "/no/such/run"}, "--shard-durations: "),
        (
            {"optbench_compare": "results/baselines/main", "gate_confirm_budget": -1.0},
            "--gate-confirm-budget takes seconds >= 0, got -1.0",
        ),
    ],
)
def test_each_options_check_is_its_one_line_error(changes, message):
    from optbench.errors import UsageProblem
    from optbench.matrix.settings import check_settings

    with pytest.raises(UsageProblem) as raised:
        check_settings(_defaults(**changes))
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


def test_defaults_pass_and_an_option_that_needs_another_is_checked_only_with_it():
    from optbench.matrix.settings import check_settings

    check_settings(_defaults())
    check_settings(_defaults(gate_confirm_budget=-1.0))  # no --optbench-compare: never used
    check_settings(_defaults(devices="cpu,cuda", batch_sizes="1, 4", accuracy_floor=1.0, converge_steps=0))


def test_per_profile_defaults_fill_only_the_options_left_unset():
    from optbench.matrix.profiles import PROFILES
    from optbench.matrix.settings import with_profile_defaults

    values = with_profile_defaults(_defaults(time_budget=2.0), PROFILES["smoke"])
    assert values["time_budget"] == 2.0 and values["target_precision"] == 0.05
    assert values["converge_steps"] == 30 and values["pipeline_images"] == 48
    assert values["calibration_samples"] == 256 and values["eval_samples"] is None
    full = with_profile_defaults(_defaults(converge_steps=0), PROFILES["full"])
    assert full["converge_steps"] == 0 and full["pipeline_images"] == 1024


def test_the_table_of_options_imports_neither_pytest_nor_torch():
    import subprocess
    import sys

    code = (
        "import sys; from optbench.matrix.settings import settings_markdown; settings_markdown(); "
        "print(sorted({'torch', 'pytest', 'pandas'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
