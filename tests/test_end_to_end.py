"""`pytest bench/` as a user runs it, in a subprocess: selection, bad input, the smoke run's table,
and a user's own models and techniques folders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
from bench_process import ROOT, run_bench
from user_repo import USER_BENCH, USER_MODEL, user_repo

from optbench.results import load


def collected_ids(*args: str, test: str = "inference") -> list[str]:
    out = run_bench("bench/", "--collect-only", "-q", *args)
    assert out.returncode == 0, out.stdout + out.stderr
    return [
        line.split("[", 1)[1].rstrip("]") for line in out.stdout.splitlines() if f"::test_{test}[" in line
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--models", "bogus"], "ERROR: unknown model 'bogus'; valid models: "),
        (["--techniques", "eager,nope"], "ERROR: unknown technique 'nope'; valid techniques: "),
        (["--devices", "tpu"], "ERROR: unknown device 'tpu'; valid devices: cpu, cuda, mps"),
        (["--models", "nope*"], "ERROR: no model matches 'nope*'; valid models: "),
        (["--techniques", "tag:nope"], "ERROR: no technique matches 'tag:nope'; valid techniques: "),
        (["--profile", "huge"], "ERROR: unknown profile 'huge'; valid profiles: smoke, default, full"),
        (
            ["--malloc", "jemalloc"],
            "ERROR: unknown malloc mode 'jemalloc'; valid malloc modes: auto, fixed, inherit",
        ),
        (["--batch-sizes", "0"], "ERROR: --batch-sizes takes positive whole numbers"),
        (["--weights", "best"], "ERROR: unknown weights 'best'; valid weights: random, trained, pretrained"),
        (["--data-dir", "/no/such/dir"], "ERROR: --data-dir /no/such/dir does not exist"),
        (["--accuracy-floor", "2"], "ERROR: --accuracy-floor takes a fraction in (0, 1]"),
        (["--time-budget", "0"], "ERROR: --time-budget takes a positive number of seconds, got 0"),
        (
            ["--target-precision", "-1"],
            "ERROR: --target-precision takes a fraction in (0, 1), e.g. 0.02, got -1",
        ),
        (["--run-id", "../escape"], "ERROR: --run-id '../escape' may hold only letters, digits"),
        (["--run-id", "a/b"], "ERROR: --run-id 'a/b' may hold only letters, digits"),
        (
            ["--timing-shape", "bogus"],
            "ERROR: unknown timing shape 'bogus'; valid timing shapes: deploy, task",
        ),
        (["--techniques", "channels_last+nope"], "ERROR: unknown technique 'nope' in 'channels_last+nope'"),
        (["--techniques", "compile+compile"], "ERROR: technique stack 'compile+compile' repeats 'compile'"),
        (
            ["--calibration-samples", "0"],
            "ERROR: --calibration-samples takes a whole number from 1 to 10000, got 0",
        ),
        (
            ["--techniques", "prune_l1_100"],
            "ERROR: prune_l1_100: prune_l1_<N> takes N, the percent of weights zeroed, from 1 to 99",
        ),
        (
            ["--techniques", "eager,prune_channels_95+int8_static_fx"],
            "ERROR: prune_channels_95: prune_channels_<N> takes N, the percent of channels removed, from 1 to 90",
        ),
        (
            ["--techniques", "workers_-1"],
            "ERROR: workers_-1: workers_<N> takes N, the number of workers, from 0 to 1024",
        ),
        (
            ["--techniques", "workers_1.5+pin_memory"],
            "ERROR: workers_1.5: workers_<N> takes N, the number of workers, from 0 to 1024",
        ),
        (["--pipeline-data", "/no/such/dir"], "ERROR: --pipeline-data /no/such/dir does not exist"),
        (["--converge-steps", "-3"], "ERROR: --converge-steps takes a whole number from 0 to 100000, got -3"),
        (
            ["--techniques", "channels_last++compile"],
            "ERROR: technique stack 'channels_last++compile' has an empty part",
        ),
    ],
)
def test_bad_names_are_one_line_usage_errors(args, message):
    out = run_bench("bench/", *args)
    assert out.returncode == pytest.ExitCode.USAGE_ERROR
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(message), lines
    assert "Traceback" not in out.stderr
    if "technique" in message or "stack" in message:
        assert "valid techniques: " in lines[0] and "channels_last" in lines[0]


def one_line_usage_error(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == pytest.ExitCode.USAGE_ERROR, out.stdout + out.stderr
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in out.stderr, lines
    return lines[0]


def test_bad_output_folders_and_run_ids_write_nothing(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    line = one_line_usage_error(run_bench("bench/", "--results-dir", str(a_file)))
    assert line == f"ERROR: --results-dir {a_file} cannot be written: it is a file, not a folder"
    line = one_line_usage_error(run_bench("bench/", "--results-dir", str(a_file / "sub")))
    assert (
        line == f"ERROR: --results-dir {a_file / 'sub'} cannot be written: {a_file} is a file, not a folder"
    )
    line = one_line_usage_error(run_bench("bench/", "--models", "resnet18", cache=a_file))
    assert line.startswith(f"ERROR: the cache folder {a_file} cannot be written: it is a file")
    # An existing run is never overwritten.
    results = tmp_path / "results"
    (results / "runs" / "kept").mkdir(parents=True)
    (results / "runs" / "kept" / "results.csv").write_text("case_id\nold\n")
    line = one_line_usage_error(run_bench("bench/", "--results-dir", str(results), "--run-id", "kept"))
    assert line.startswith(f"ERROR: run 'kept' already exists in {results / 'runs'}; nothing is overwritten")
    assert (results / "runs" / "kept" / "results.csv").read_text() == "case_id\nold\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "results"]
    assert [p.name for p in (results / "runs").iterdir()] == ["kept"]


def test_pytest_xdist_is_refused_in_one_line():
    pytest.importorskip("xdist")
    line = one_line_usage_error(run_bench("bench/", "--models", "resnet18", "-n", "2"))
    assert line.startswith("ERROR: optbench times one case at a time: pytest-xdist's -n")


def test_pretrained_weights_offline_name_the_file_and_where(tmp_path):
    env_home = {"TORCH_HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "bench/", "--weights", "pretrained", "--models", "resnet18", "-p",
         "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, **env_home, "OPTBENCH_CACHE": str(tmp_path)},
    )  # fmt: skip
    assert out.returncode == pytest.ExitCode.USAGE_ERROR
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert lines == [
        f"ERROR: --weights pretrained: resnet18 needs resnet18-f37072fd.pth in {tmp_path}/hub/checkpoints "
        "(nothing is downloaded; copy the file there, or use --weights trained)"
    ]


def test_selection_options_keyword_and_markers():
    ids = collected_ids("--models", "resnet18,vit_b_16", "--techniques", "eager,compile", "--devices", "cpu")
    assert ids == [
        "resnet18-eager-cpu-bs8",
        "resnet18-compile-cpu-bs8",
        "vit_b_16-eager-cpu-bs2",
        "vit_b_16-compile-cpu-bs2",
    ]
    # The default profile's own techniques and stacks; full's are every one.
    assert collected_ids("-k", "resnet18 and bf16", "--devices", "cpu") == [
        "resnet18-bf16_autocast-cpu-bs8",
        "resnet18-channels_last+bf16_autocast+compile-cpu-bs8",
    ]
    assert collected_ids(
        "-k", "resnet18 and bf16", "--devices", "cpu", "--profile", "full", "--batch-sizes", "8"
    ) == [
        "resnet18-bf16_autocast-cpu-bs8",
        "resnet18-channels_last+bf16_autocast-cpu-bs8",
        "resnet18-channels_last+bf16_autocast+compile-cpu-bs8",
    ]
    with_cuda = collected_ids("--models", "resnet18", "--techniques", "eager", "--devices", "cpu,cuda")
    assert with_cuda == ["resnet18-eager-cpu-bs8", "resnet18-eager-cuda-bs8"]
    assert collected_ids(
        "--models", "resnet18", "--techniques", "eager", "--devices", "cpu,cuda", "-m", "not cuda"
    ) == ["resnet18-eager-cpu-bs8"]
    # A stack carries the markers of each of its parts, and "stack".
    assert collected_ids(
        "--models",
        "resnet18",
        "-m",
        "precision",
        "--batch-sizes",
        "1,4",
        "--devices",
        "cpu",
        "--profile",
        "full",
    ) == [
        "resnet18-bf16_autocast-cpu-bs1",
        "resnet18-fp16_autocast-cpu-bs1",
        "resnet18-channels_last+bf16_autocast-cpu-bs1",
        "resnet18-channels_last+bf16_autocast+compile-cpu-bs1",
        "resnet18-bf16_autocast-cpu-bs4",
        "resnet18-fp16_autocast-cpu-bs4",
        "resnet18-channels_last+bf16_autocast-cpu-bs4",
        "resnet18-channels_last+bf16_autocast+compile-cpu-bs4",
    ]
    # Wildcards and tags, as timm's list_models: models by name pattern or tag, techniques by family.
    assert collected_ids("--models", "resnet*", "--techniques", "tag:layout", "--devices", "cpu") == [
        "resnet18-channels_last-cpu-bs8",
        "resnet50-channels_last-cpu-bs8",
    ]
    assert collected_ids(
        "--models", "resnet18", "-m", "stack", "--devices", "cuda", "--profile", "full", "--batch-sizes", "8"
    ) == [
        "resnet18-channels_last+fp16_autocast-cuda-bs8",
        "resnet18-channels_last+fp16_autocast+compile-cuda-bs8",
        # Collected, then a skipped row: torchao int8 dynamic leaves a CNN's convolutions alone.
        "resnet18-torchao_int8_dynamic+compile-cuda-bs8",
    ]


def test_training_and_data_cases_are_collected_with_their_own_defaults():
    training = collected_ids("--models", "resnet18", "--devices", "cpu", test="training")
    assert "resnet18-grad_accum_2-cpu-bs8-training" in training
    assert "resnet18-activation_checkpoint-cpu-bs8-training" in training
    assert not any("int8" in i or "prune" in i for i in training)  # inference-only techniques stay out
    # The data sweep reads images for resnet18 at its own batch sizes unless the user chooses.
    data = collected_ids("--techniques", "workers_9", "--devices", "cpu", test="data_pipeline")
    assert data == ["resnet18-workers_9-cpu-bs32-data"]  # the default profile: batch 32 (full: 32, 64, 128)
    chosen = collected_ids(
        "--models", "resnet50", "--techniques", "eager", "--batch-sizes", "16", "--devices", "cpu",
        test="data_pipeline",
    )  # fmt: skip
    assert chosen == ["resnet50-eager-cpu-bs16-data"]


SLOW_STACK = "channels_last+bf16_autocast+compile"


def data_left_out() -> set[str]:
    """Loader settings the smoke run leaves out: those that respawn their workers each epoch, as the
    tuned worker count alone does (workers_2 on 2 cores), but for that one."""
    from optbench.catalog.techniques.data_loader import available_cores, worker_levels

    cores = available_cores()
    tuned = f"workers_{cores}"
    lower = {f"workers_{n}" for n in worker_levels(cores) if n != cores}
    return lower | {f"{tuned}+{rest}" for rest in ("pin_memory", "prefetch_4", "decode_jpeg")}


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    cache = tmp_path_factory.mktemp("cache")
    # --devices cpu: the expectations below hold on a machine with a GPU too.
    args = (
        "bench/",
        "--profile",
        "smoke",
        "--devices",
        "cpu",
        "--results-dir",
        str(results),
        "--run-id",
        "smoke",
        "--techniques",  # every technique and default stack in each mode, not only smoke's list
        "all",
        # ... but for cases whose every part runs here too, which added 1.5 (inductor cache warm) to
        # 2.5 minutes to the suite on 2 cores: the compiled training stack (its compile,
        # channels_last and bf16 parts are each trained) and the loader settings of data_left_out
        # (tests/test_matrix.py checks that `all` selects them all).
        "-k",
        " and ".join(
            [f"not ({SLOW_STACK} and training)", *(f"not {t}-cpu" for t in sorted(data_left_out()))]
        ),
    )
    out = run_bench(*args, cache=cache)
    return out, results, cache, args


SMOKE_TECHNIQUES = (
    "eager",
    "channels_last",
    "bf16_autocast",
    "fp16_autocast",
    "compile",
    "int8_dynamic",
    "torchao_int8_dynamic",
    "torchao_int8_weight_only",
    "int8_static_fx",
    "int8_static_pt2e",
    "linear_csr",
    "prune_channels_30",
    "prune_channels_50",
    "prune_l1_50",
    "prune_l1_70",
    "prune_l1_90",
    "sparse_2to4",
    "channels_last+bf16_autocast",
    "channels_last+bf16_autocast+compile",
    "torchao_int8_dynamic+compile",
    "prune_l1_50+linear_csr",
    "prune_l1_70+linear_csr",
    "prune_l1_90+linear_csr",
    "prune_channels_50+int8_static_fx",
    "prune_channels_30+int8_static_fx",
    "prune_l1_70+int8_dynamic",
)
SMOKE_IDS = {
    f"{model}-{tech}-cpu-bs{bs}"
    for model, bs in (("resnet18", 2), ("lstm_classifier", 4))
    for tech in SMOKE_TECHNIQUES
}
SMOKE_SKIPPED = {
    *(f"resnet18-{t}-cpu-bs2" for t in SMOKE_TECHNIQUES if "linear_csr" in t or "int8_dynamic" in t),
    "resnet18-torchao_int8_weight_only-cpu-bs2",
    "resnet18-fp16_autocast-cpu-bs2",
    "resnet18-sparse_2to4-cpu-bs2",
    *(f"lstm_classifier-{t}-cpu-bs4" for t in SMOKE_TECHNIQUES if "channels" in t or "int8_static" in t),
    "lstm_classifier-fp16_autocast-cpu-bs4",
    "lstm_classifier-sparse_2to4-cpu-bs4",
}


def inference_rows(results):
    frame = load(results)
    return frame[frame["mode"] == "inference"]


def test_smoke_profile_writes_one_sane_row_per_case(smoke_run):
    out, results, _, _ = smoke_run
    everything = load(results / "latest")
    # Pruning may cost the LSTM more than the 1% floor (0.908 fp32 top-1 on 500 held-out samples:
    # the floor is 5 samples): those rows fail as they should, and nothing else may.
    lost = everything[everything["status"] == "fail_accuracy"]
    assert lost["case_id"].str.startswith("lstm_classifier-prune_l1").all(), lost["case_id"].tolist()
    assert out.returncode == (1 if len(lost) else 0), out.stdout[-3000:] + out.stderr[-3000:]
    assert (results / "latest").resolve() == (results / "runs" / "smoke").resolve()
    frame = everything[everything["mode"] == "inference"]
    assert set(frame["case_id"]) == SMOKE_IDS and len(frame) == len(SMOKE_IDS)
    assert set(frame["run_id"]) == {"smoke"}
    run = json.loads((results / "runs" / "smoke" / "run.json").read_text())
    # --malloc auto (the default) as it resolved here: the thresholds the rows were timed under
    from optbench.catalog.allocator import auto_choice

    assert run["config"]["malloc"] == auto_choice(os.environ, False)[0]

    passed = frame[frame["status"] == "passed"]
    skipped = frame[frame["status"] == "skipped"]
    assert set(frame["status"]) <= {"passed", "skipped", "fail_accuracy"}
    assert (passed["latency_ms_min"] > 0).all() and (
        passed["latency_ms_median"] >= passed["latency_ms_min"]
    ).all()
    assert (passed["throughput"] > 0).all() and (passed["speedup"] > 0).all()
    assert (passed["rounds"] >= 8).all() and (passed["params"] > 0).all() and (passed["size_bytes"] > 0).all()
    assert (passed["flops_per_sample"] > 0).all() and (passed["prepare_s"] > 0).all()
    eager = passed[passed["technique"] == "eager"]
    assert len(eager) == 2 and (eager["speedup"] == 1.0).all()
    assert set(skipped["case_id"]) == SMOKE_SKIPPED
    # Every compression row carries its sizes; quantized and pruned ones are smaller.
    compressed = passed[passed["family"].str.contains("quantization|pruning")]
    assert len(compressed) >= 15 and (compressed["nonzero_fraction"].between(0, 1)).all()
    assert (
        passed.set_index("case_id").loc["resnet18-prune_channels_50+int8_static_fx-cpu-bs2", "size_reduction"]
        > 70
    )
    assert (passed.loc[passed["technique"] == "int8_static_fx", "size_reduction"] > 60).all()
    assert skipped["reason"].str.len().gt(10).all()
    compiled = passed.set_index("case_id").loc["resnet18-compile-cpu-bs2"]
    assert compiled["prepare_s"] > compiled["latency_ms_median"] / 1e3  # compiling costs more than a call


def test_smoke_rows_carry_accuracy_fidelity_and_status(smoke_run):
    out, results, cache, args = smoke_run
    frame = inference_rows(results / "runs" / "smoke").set_index("case_id")
    passed = frame[frame["status"] == "passed"]
    assert (passed["weights"] == "trained").all() and passed["weights_source"].str.contains(
        "cache miss"
    ).all()
    # Timed at the deployment shape, evaluated at the task's shape, with the same trained weights.
    assert set(passed["input_shape"]) == {"3x224x224", "seq64"}
    assert set(passed["eval_input_shape"]) == {"3x32x32", "seq32"}
    assert (passed["eval_samples"] > 0).all() and (passed["top1"] > 0.5).all()
    # Passed: the paired interval of the change is within the floor, or straddles it (unclear); a
    # point below 0.99 x fp32 passes only as unclear.
    compared = passed[passed["top1_fp32"].notna()]
    assert compared["accuracy_verdict"].isin(["within floor", "unclear"]).all()
    below = compared[compared["top1"] < 0.99 * compared["top1_fp32"]]
    assert (below["accuracy_verdict"] == "unclear").all() and below["accuracy_note"].notna().all()
    assert (results / "runs" / "smoke" / "claims.md").read_text().count("| Pruning plus quantization") == 2
    for column in ("agreement", "max_abs_error", "mean_abs_error", "cosine_similarity", "top1_ratio"):
        assert passed[column].notna().all(), column
    eager = passed[passed["technique"] == "eager"]
    assert (eager["agreement"] == 1.0).all() and (eager["max_abs_error"] == 0).all()
    assert (passed.loc[passed["technique"] == "bf16_autocast", "max_abs_error"] > 0).all()
    assert len(list((cache / "checkpoints").glob("*.pt"))) == 2
    # Fine-tuned pruned weights are cached too: one per pruning technique and model.
    assert len(list((cache / "prepared").glob("prune_*.pt"))) == 3 + 3 + 2


def test_second_run_loads_the_cached_checkpoints(smoke_run, tmp_path):
    out, results, cache, args = smoke_run
    again = run_bench(
        *args, "--run-id", "again", "--techniques", "eager", "-k", "not data_pipeline", cache=cache
    )
    assert again.returncode == 0, again.stdout[-2000:]
    frame = load(results / "runs" / "again")
    assert set(frame["mode"]) == {"inference", "training"}
    assert frame["weights_source"].str.contains("cache hit").all()
    first = load(results / "runs" / "smoke").set_index("case_id")
    for _, row in frame[frame["mode"] == "inference"].iterrows():  # same weights, same predictions
        assert row["top1"] == first.loc[row["case_id"], "top1"]
        # ... read back: the same code, weights, technique and machine evaluated them in the first run
        assert row["eval_cached"] == True and first.loc[row["case_id"], "eval_cached"] == False  # noqa: E712
    for _, row in frame[frame["mode"] == "training"].iterrows():  # seeded: the same short training
        assert row["converge_top1"] == first.loc[row["case_id"], "converge_top1"]
        assert row["converge_cached"] == True  # noqa: E712


def test_smoke_run_prints_the_table_and_writes_pytest_benchmark_json(smoke_run):
    out, results, _, _ = smoke_run
    assert "optbench: speedup vs eager fp32" in out.stdout
    table_line = next(
        line
        for line in out.stdout.splitlines()
        if line.lstrip().startswith("resnet18") and " inference " in line
    )
    assert "1.00x" in table_line and "skip" in table_line
    assert "fp16_autocast does not run on cpu" in out.stdout
    data = json.loads((results / "runs" / "smoke" / "benchmark.json").read_text())
    names = {b["name"] for b in data["benchmarks"]}
    assert "test_inference[resnet18-eager-cpu-bs2]" in names
    first = next(b for b in data["benchmarks"] if b["name"] == "test_inference[resnet18-eager-cpu-bs2]")
    assert first["extra_info"]["speedup"] == 1.0 and first["stats"]["rounds"] == len(first["stats"]["data"])


TRAINING_TECHNIQUES = (
    "eager",
    "activation_checkpoint",
    "bf16_autocast",
    "fp16_autocast",
    "channels_last",
    "compile",
    "grad_accum_2",
    "grad_accum_4",
    "channels_last+bf16_autocast",
    "channels_last+bf16_autocast+compile",
)
TRAINING_SKIPPED = {
    "resnet18-fp16_autocast-cpu-bs2-training",
    "resnet18-grad_accum_4-cpu-bs2-training",  # batch 2 does not split into 4
    "lstm_classifier-fp16_autocast-cpu-bs4-training",
    "lstm_classifier-activation_checkpoint-cpu-bs4-training",
    *(
        f"lstm_classifier-{t}-cpu-bs4-training"
        for t in TRAINING_TECHNIQUES
        if "channels_last" in t and t != SLOW_STACK
    ),
}


def data_settings() -> set[str]:
    from optbench.catalog.techniques.data_loader import available_cores, worker_levels

    cores = available_cores()
    tuned = f"workers_{cores}"
    return {
        "eager",
        "pin_memory",
        "decode_jpeg",
        "no_augment",
        "no_shuffle",
        *(f"workers_{n}" for n in worker_levels(cores)),
        *(
            f"{tuned}+{rest}"
            for rest in (
                "pin_memory",
                "persistent_workers",
                "prefetch_4",
                "decode_jpeg",
                "persistent_workers+decode_jpeg",
            )
        ),
    }


def test_smoke_training_and_data_rows_carry_speed_memory_and_convergence(smoke_run):
    out, results, _, _ = smoke_run
    frame = load(results / "runs" / "smoke")
    training = frame[frame["mode"] == "training"].set_index("case_id")
    expected = {
        f"{model}-{t}-cpu-bs{bs}-training"
        for model, bs in (("resnet18", 2), ("lstm_classifier", 4))
        for t in TRAINING_TECHNIQUES
        if t != SLOW_STACK  # left out of the run (smoke_run)
    }
    assert set(training.index) == expected
    assert set(training.index[training["status"] == "skipped"]) == TRAINING_SKIPPED
    ran = training[training["status"] != "skipped"]
    assert (ran["status"] == "passed").all(), ran["reason"].dropna().tolist()
    assert (ran["latency_ms_median"] > 0).all() and (ran["throughput"] > 0).all()
    assert (ran["speedup"] > 0).all() and (ran["peak_mem_mb"] > 0).all()
    # FLOPs of forward and backward: at least twice the forward pass's
    forward = inference_rows(results / "runs" / "smoke").set_index("case_id")
    assert (
        ran.loc["resnet18-eager-cpu-bs2-training", "flops_per_sample"]
        >= 2 * forward.loc["resnet18-eager-cpu-bs2", "flops_per_sample"]
    )
    # Convergence columns are present and sane: finite loss, top-1 well above chance (0.1)
    assert (ran["converge_steps"] == 30).all() and ran["converge_loss"].between(0, 5).all()
    assert ran["converge_top1"].between(0.15, 1).all() and ran["converge_top1_fp32"].notna().all()
    assert ran.loc["resnet18-eager-cpu-bs2-training", "converge_top1"] > 0.8
    data = frame[frame["mode"] == "data"]
    assert data_left_out() < data_settings()
    assert set(data["technique"]) == data_settings() - data_left_out() and set(data["batch_size"]) == {8}
    assert (data["status"] == "passed").all(), data["reason"].dropna().tolist()
    assert (data["throughput"] > 0).all() and (data["loader_samples_per_s"] > 0).all()
    assert (data["dataset_images"] == 48).all()
    # Eager fed one epoch alone (48 images at batch 8); the others paired with it, a block one batch.
    eager, paired = data[data["technique"] == "eager"], data[data["technique"] != "eager"]
    assert (eager["rounds"] == 6).all() and eager["speedup_method"].eq("baseline").all()
    assert paired["speedup_method"].eq("paired").all() and (paired["pairs"] >= 10).all()
    assert (paired["rounds"] == paired["pairs"]).all()
    claims = (results / "runs" / "smoke" / "claims.md").read_text()
    assert claims.count("| Mixed precision took training from days to hours | ") == 2
    assert "| A tuned data pipeline cut training time by 30% | resnet18 | cpu |" in claims


USER_TECHNIQUE = """
from optbench import Technique, register_technique

@register_technique
class Explode(Technique):
    name = "explode"
    family = "precision"
    api = "user"

    def apply(self, prepared, ctx):
        raise RuntimeError("this technique always fails")
"""


def test_users_own_models_and_techniques_join_the_matrix(tmp_path):
    for rel, text in {
        "models/my_net.py": USER_MODEL,
        "techniques/explode.py": USER_TECHNIQUE,
        "bench/test_inference.py": USER_BENCH,
    }.items():
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    out = run_bench(
        "bench/",
        "--models",
        "my_net",
        "--techniques",
        "explode,eager,channels_last",
        "--profile",
        "smoke",
        "--time-budget",
        "0.2",
        cwd=tmp_path,
    )
    assert out.returncode == pytest.ExitCode.TESTS_FAILED, out.stdout + out.stderr
    assert "my_net-explode-cpu-bs2: failed: RuntimeError: this technique always fails" in out.stdout
    frame = pd.read_csv(tmp_path / "results" / "latest" / "results.csv").set_index("case_id")
    assert frame["status"].to_dict() == {
        "my_net-eager-cpu-bs2": "passed",
        "my_net-explode-cpu-bs2": "failed",
        "my_net-channels_last-cpu-bs2": "passed",
    }
    assert frame.loc["my_net-explode-cpu-bs2", "reason"] == "RuntimeError: this technique always fails"
    # The default recipe leaves this tiny model well below its target: every row says so, with the
    # top-1 it reached, the summary lists it and the run warns once.
    assert frame["below_target"].all() and (frame["trained_top1"] < frame["target_top1"]).all()
    assert "trained below target (1):" in out.stdout
    assert out.stdout.count("UserWarning: my_net reached held-out top-1") == 1


def test_user_data_dir_trains_and_evaluates_on_the_users_split(tmp_path):
    from PIL import Image

    (tmp_path / "models").mkdir()
    (tmp_path / "bench").mkdir()
    # A recipe that learns 48 colored squares: the zoo default (lr 1e-3, batch 64) takes 1 step an epoch.
    model = textwrap.dedent(USER_MODEL).replace(
        "resolution=16,", "resolution=16, recipe=TrainRecipe(max_epochs=30, lr=0.05, batch_size=16),"
    )
    (tmp_path / "models" / "my_net.py").write_text("from optbench import TrainRecipe\n" + model)
    (tmp_path / "bench" / "test_inference.py").write_text(textwrap.dedent(USER_BENCH))
    data = tmp_path / "data"
    for split, count in (("train", 24), ("val", 6)):
        for name, color in (("red", (220, 20, 20)), ("blue", (20, 20, 220))):
            (data / split / name).mkdir(parents=True)
            for i in range(count):
                Image.new("RGB", (24, 24), tuple(min(255, c + 3 * i) for c in color)).save(
                    data / split / name / f"{i}.png"
                )
    out = run_bench("bench/", "--models", "my_net", "--techniques", "eager,bf16_autocast", "--profile", "smoke",
                    "--time-budget", "0.2", "--data-dir", str(data), "--record-accuracy-only", cwd=tmp_path,
                    cache=tmp_path / "cache")  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    frame = pd.read_csv(tmp_path / "results" / "latest" / "results.csv").set_index("case_id")
    assert (frame["eval_samples"] == 12).all()
    assert frame["weights_source"].str.contains(f"imagefolder:{data}").all()
    assert (frame["top1"] == 1.0).all()  # red vs blue: the user's own split, learned
    assert frame.loc["my_net-eager-cpu-bs2", "agreement"] == 1.0


PACKAGE_MODEL = """
from optbench import image_classifier, register_model

from .layers import tiny_net

register_model(image_classifier("pkg_net", tiny_net, resolution=16))
"""

PACKAGE_LAYERS = """
from torch import nn


def tiny_net(num_classes):
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, num_classes))
"""

PLUGIN_MODULE = """
from torch import nn
from optbench import Technique, image_classifier, register_model, register_technique

register_model(image_classifier("plugin_net", lambda n: nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, n)),
                                resolution=8))


@register_technique
class PluginNoop(Technique):
    name = "plugin_noop"
    family = "layout"
    api = "plugin"

    def apply(self, prepared, ctx):
        return prepared.then(self.api)
"""


def test_a_users_repository_benchmarks_its_own_models_not_the_zoo(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("")
    (tmp_path / "models" / "layers.py").write_text(PACKAGE_LAYERS)  # relative import from a package
    (tmp_path / "models" / "pkg_net.py").write_text(PACKAGE_MODEL)
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "test_inference.py").write_text(textwrap.dedent(USER_BENCH))

    def ids(*args: str, env: dict | None = None) -> list[str]:
        out = run_bench("bench/", "--collect-only", "-q", "--devices", "cpu", *args, cwd=tmp_path, env=env)
        assert out.returncode == 0, out.stdout + out.stderr
        return [line.split("[", 1)[1].rstrip("]") for line in out.stdout.splitlines() if "[" in line]

    models = {case.split("-", 1)[0] for case in ids("--profile", "smoke")}
    assert models == {"pkg_net"}
    assert {case.split("-", 1)[0] for case in ids("--profile", "smoke", "--zoo")} == {
        "pkg_net",
        "resnet18",
        "lstm_classifier",
    }
    assert {case.split("-", 1)[0] for case in ids("--models", "pkg_net,resnet18")} == {"pkg_net", "resnet18"}
    # The default profile takes one zoo model of each kind (resnet50 and EfficientNet are full's),
    # and the user's own model whatever the profile.
    assert {case.rsplit("-", 3)[0].split("-", 1)[0] for case in ids("--zoo")} == {
        "pkg_net", "resnet18", "mobilenet_v3_large", "vit_ti_16", "bert_mini_encoder", "lstm_classifier"
    }  # fmt: skip

    # An installed package registers a model and a technique through the optbench.plugins entry points.
    site = tmp_path / "site"
    (site / "optbench_demo_plugin-0.1.dist-info").mkdir(parents=True)
    (site / "optbench_demo_plugin.py").write_text(PLUGIN_MODULE)
    (site / "optbench_demo_plugin-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: optbench-demo-plugin\nVersion: 0.1\n"
    )
    (site / "optbench_demo_plugin-0.1.dist-info" / "entry_points.txt").write_text(
        "[optbench.plugins]\ndemo = optbench_demo_plugin\n"
    )
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    with_plugin = ids("--techniques", "eager,plugin_noop", env={"PYTHONPATH": path})
    assert "plugin_net-plugin_noop-cpu-bs8" in with_plugin and "pkg_net-plugin_noop-cpu-bs8" in with_plugin


def test_optbench_train_trains_a_users_model(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "my_net.py").write_text(textwrap.dedent(USER_MODEL))
    out = subprocess.run(
        [sys.executable, "-m", "optbench.cli", "train", "--quiet"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "OPTBENCH_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("my_net")]
    assert len(rows) == 1 and rows[0][1] == "3x16x16" and rows[0][2] == "miss"
    assert "resnet18" not in out.stdout  # the zoo is not trained in a user's repository
    assert len(list((tmp_path / "cache" / "checkpoints").glob("my_net-*.pt"))) == 1


def test_tool_optbench_in_pyproject_sets_defaults_and_the_command_line_wins(tmp_path):
    repo = user_repo(
        tmp_path,
        """
        [tool.optbench]
        profile = "smoke"
        models = ["my_net", "resnet18"]
        techniques = "eager,channels_last"
        devices = ["cpu"]
        batch_sizes = [1, 3]

        [tool.optbench.gate]  # the gate's own table: the plugin leaves it alone
        latency_pct = 15
        """,
    )
    out = run_bench("bench/", "--collect-only", "-q", cwd=repo)
    assert out.returncode == 0, out.stdout + out.stderr
    ids = [line.split("[", 1)[1].rstrip("]") for line in out.stdout.splitlines() if "[" in line]
    assert ids == [
        f"{model}-{tech}-cpu-bs{bs}"
        for model in ("my_net", "resnet18")
        for bs in (1, 3)
        for tech in ("eager", "channels_last")
    ]
    out = run_bench("bench/", "--collect-only", "-q", "--techniques", "eager", "--batch-sizes=2", cwd=repo)
    ids = [line.split("[", 1)[1].rstrip("]") for line in out.stdout.splitlines() if "[" in line]
    assert ids == ["my_net-eager-cpu-bs2", "resnet18-eager-cpu-bs2"]


@pytest.mark.parametrize(
    "table, message",
    [
        ("colour = 'red'", "unknown key 'colour'; valid keys: profile, models,"),
        ("time_budget = 'fast'", "time_budget must be a number, got 'fast'"),
        ("zoo = 'yes'", "zoo must be true or false, got 'yes'"),
        ("models = ['nope']", "unknown model 'nope'; valid models: "),
        ("time_budget = -1", "--time-budget takes a positive number of seconds, got -1"),
        ("devices = ['cpu', 'tpu']", "unknown device 'tpu'; valid devices: cpu, cuda, mps"),
        ("pipeline_crop = 8", "--pipeline-crop takes a side in pixels from 16 to 2048, got 8"),
    ],
)
def test_bad_tool_optbench_settings_are_one_line_naming_the_key(tmp_path, table, message):
    repo = user_repo(tmp_path, f"[tool.optbench]\n{table}\n")
    line = one_line_usage_error(run_bench("bench/", cwd=repo))
    assert line.startswith("ERROR: ") and message in line
    key = table.split(" = ")[0]
    assert key in line and str(repo / "pyproject.toml") in line


def test_plain_pytest_bench_reports_a_broken_model_file_in_one_line(tmp_path):
    repo = user_repo(tmp_path)
    (repo / "models" / "broken.py").write_text("raise ImportError('no such layer')\n")
    line = one_line_usage_error(run_bench("bench/", cwd=repo))
    assert line.startswith("ERROR: could not load ") and "broken.py: ImportError: no such layer" in line


def test_pretrained_weights_time_and_evaluate_at_their_own_size_and_skip_models_without(tmp_path):
    import torch
    from PIL import Image
    from torchvision.models import resnet18

    hub = tmp_path / "torch" / "hub" / "checkpoints"
    hub.mkdir(parents=True)
    torch.manual_seed(0)
    torch.save(resnet18(weights=None).state_dict(), hub / "resnet18-f37072fd.pth")  # the expected name
    data = tmp_path / "data"
    for name, color in (("tench", (200, 30, 30)), ("goldfish", (30, 30, 200))):  # ImageNet's 0 and 1
        (data / name).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (40, 30), color).save(data / name / f"{i}.png")
    results = tmp_path / "results"
    out = run_bench(
        "bench/", "--weights", "pretrained", "--data-dir", str(data), "--models", "resnet18,lstm_classifier",
        "--techniques", "eager", "--devices", "cpu", "--profile", "smoke", "--time-budget", "0.2",
        "--results-dir", str(results), "--record-accuracy-only",
        env={"TORCH_HOME": str(tmp_path / "torch")},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    frame = load(results / "latest").set_index("case_id")
    row = frame.loc["resnet18-eager-cpu-bs2"]
    assert row["status"] == "passed" and row["weights"] == "pretrained"
    assert row["input_shape"] == row["eval_input_shape"] == "3x224x224" and row["eval_samples"] == 6
    assert "resnet18-f37072fd.pth" in row["weights_source"]
    skipped = frame.loc["lstm_classifier-eager-cpu-bs4"]
    assert skipped["status"] == "skipped"
    assert (
        skipped["reason"] == "--weights pretrained: torchvision has no pretrained weights for lstm_classifier"
    )


def test_the_default_profile_prepares_a_quantized_case_twice_and_smoke_once(tmp_path):
    """A real int8 case, prepared and timed against eager twice over outside smoke's cap."""
    rows = {}
    for profile in ("default", "smoke"):
        results = tmp_path / profile
        out = run_bench(
            "bench/test_inference.py", "--models", "lstm_classifier", "--techniques", "eager,int8_dynamic",
            "--weights", "random", "--devices", "cpu", "--profile", profile, "--time-budget", "0.2",
            "--results-dir", str(results),
        )  # fmt: skip
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        frame = load(results / "latest").set_index("case_id")
        rows[profile] = frame[frame["technique"] == "int8_dynamic"].iloc[0]
    assert rows["default"]["status"] == "passed" and rows["default"]["preparations"] == 2
    assert rows["default"]["preparation_spread"] >= 1.0 and rows["default"]["pairs"] >= 10
    assert rows["smoke"]["preparations"] == 1 and pd.isna(rows["smoke"]["preparation_spread"])


def test_smoke_run_report_has_every_section_and_is_looked_at_in_chromium(smoke_run, tmp_path):
    """`optbench report` on the real smoke run (inference, training and data rows), then the page
    as a person sees it: headless Chromium loads it with no console error, every plot is drawn, the
    recommendation names a technique of the run, and the model filter hides the other model."""
    from browser import APT_INSTALL, Browser, chromium_missing_reason
    from test_report import SECTIONS

    from optbench.cli import main

    _, results, _, _ = smoke_run
    run = results / "runs" / "smoke"
    out = tmp_path / "report"
    assert main(["report", str(run), "--out", str(out)]) == 0
    markdown = (out / "report.md").read_text()
    for section in SECTIONS:
        assert section in markdown
    frame = load(run)
    for mode in ("inference", "training", "data"):
        assert f"| resnet18 | cpu | {mode} |" in markdown.split("## Comparison grid")[0]
    if chromium_missing_reason():
        pytest.skip(f"headless Chromium is needed: {chromium_missing_reason()} (CI runs `{APT_INSTALL}`)")
    with Browser(timeout=60) as browser:
        browser.open(out / "report.html")
        assert browser.errors() == []
        plots = browser.plots()
        assert {(p.kind, p.model) for p in plots} >= {
            (kind, model)
            for kind in ("pareto", "latency", "size_speed", "pct_of_peak")
            for model in ("resnet18", "lstm_classifier")
        }
        for plot in plots:
            assert plot.tag == "svg" and plot.width > 100 and plot.height > 100, plot
        named = {r.data_technique for r in browser.recommendations() if r.data_technique}
        assert named and named <= set(frame["technique"]), named
        visible = browser.select_filter("filter-model", "lstm_classifier")
        assert {e.data.get("model") for e in visible if e.visible} == {"lstm_classifier"}
        browser.screenshot(tmp_path / "report.png")
