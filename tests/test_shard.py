"""Sharding the matrix and merging the shards: K/N parsing, runner environments, the plan (groups
whole, balanced), a real 3-way sharded run merged, and merge refusals."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
from bench_process import run_bench

from optbench.cli import EXIT_OK, EXIT_USAGE, main
from optbench.errors import UsageProblem
from optbench.matrix.shard import Shard, detect_shard, parse_shard, plan
from optbench.results import load
from optbench.results.manifest import Manifest


@pytest.mark.parametrize("text", ["0/3", "4/3", "x/3", "3", "1/0", "-1/3"])
def test_bad_shard_specs_are_one_clear_line(text):
    with pytest.raises(UsageProblem, match=r"--shard takes K/N"):
        parse_shard(text)


def test_shards_come_from_the_runners_environment():
    assert detect_shard({}) is None
    assert detect_shard({"OPTBENCH_SHARD": "2/5"}) == Shard(2, 5, "OPTBENCH_SHARD")
    k8s = detect_shard({"JOB_COMPLETION_INDEX": "0", "OPTBENCH_SHARD_COUNT": "3"})
    assert (k8s.index, k8s.count) == (1, 3)
    slurm = detect_shard(
        {"SLURM_ARRAY_TASK_ID": "12", "SLURM_ARRAY_TASK_MIN": "10", "SLURM_ARRAY_TASK_COUNT": "4"}
    )
    assert (slurm.index, slurm.count) == (3, 4)
    gitlab = detect_shard({"CI_NODE_INDEX": "4", "CI_NODE_TOTAL": "4"})
    assert (gitlab.index, gitlab.count) == (4, 4)
    with pytest.raises(UsageProblem, match="OPTBENCH_SHARD_COUNT is not"):
        detect_shard({"JOB_COMPLETION_INDEX": "1"})
    with pytest.raises(UsageProblem, match="JOB_COMPLETION_INDEX takes K/N with 1 <= K <= N"):
        detect_shard({"JOB_COMPLETION_INDEX": "3", "OPTBENCH_SHARD_COUNT": "3"})


def test_plan_keeps_groups_whole_and_balances_expected_time():
    groups = {f"g{i}": [f"g{i}-c{j}" for j in range(i + 1)] for i in range(7)}  # 1..7 cases
    shards = plan(groups, 3)
    assert sorted(g for s in shards for g in s) == sorted(groups)  # each group exactly once
    loads = [sum(len(groups[g]) for g in s) for s in shards]
    assert max(loads) - min(loads) <= 1  # 28 cases of 30 s: 10, 9, 9
    assert plan(groups, 3) == shards  # deterministic
    # An earlier run's durations move a slow group onto a shard of its own.
    durations = {case: 1.0 for cases in groups.values() for case in cases} | {"g0-c0": 100.0}
    slow = plan(groups, 3, durations)
    assert ["g0"] in slow


def _ids(out) -> list[str]:
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return [line.split("[", 1)[1].rstrip("]") for line in out.stdout.splitlines() if "::test_" in line]


def _group(case_id: str) -> str:
    """model-device-bsN-mode from a case id (the technique is the part that varies in a group)."""
    model, rest = case_id.split("-", 1)
    match = re.search(r"-(cpu|cuda|mps)-bs(\d+)(-\w+)?$", rest)
    return f"{model}{match.group(0)}"


def test_the_smoke_matrix_sharded_three_ways_is_the_whole_matrix_with_no_group_split():
    args = ("bench/", "--collect-only", "-q", "--profile", "smoke", "--devices", "cpu")
    whole = _ids(run_bench(*args))
    parts = [_ids(run_bench(*args, "--shard", f"{k}/3")) for k in (1, 2, 3)]
    assert sorted(c for p in parts for c in p) == sorted(whole)
    owners = {}
    for k, part in enumerate(parts):
        assert part, f"shard {k + 1} is empty"
        for case in part:
            assert owners.setdefault(_group(case), k) == k, f"{_group(case)} split across shards"
    assert len(set(owners)) >= 3
    # The environment gives the shard too (a Kubernetes Indexed Job here).
    env = {"JOB_COMPLETION_INDEX": "1", "OPTBENCH_SHARD_COUNT": "3"}
    assert _ids(run_bench(*args, env=env)) == parts[1]


RUN = (
    "bench/test_inference.py",
    "--models", "resnet18,lstm_classifier",
    "--techniques", "eager,bf16_autocast",
    "--batch-sizes", "1,2",
    "--weights", "random",
    "--devices", "cpu",
    "--time-budget", "0.05",
    "--timing-shape", "task",
)  # fmt: skip


SHARD_2_PERTURB = "0"


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    for k in (1, 2, 3):
        env = {"MALLOC_PERTURB_": SHARD_2_PERTURB} if k == 2 else None  # 0: no perturbing; only recorded
        out = run_bench(
            *RUN, "--shard", f"{k}/3", "--results-dir", str(results), "--run-id", f"part{k}", env=env
        )
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return results / "runs"


def test_a_sharded_run_merges_into_the_run_it_would_have_been(sharded, tmp_path, capsys):
    whole = _ids(run_bench(*RUN, "--collect-only", "-q"))
    out = tmp_path / "merged"
    assert main(["merge", *(str(sharded / f"part{k}") for k in (1, 2, 3)), "--out", str(out)]) == EXIT_OK
    assert "merged 3 shards" in capsys.readouterr().out
    frame = load(out)
    assert sorted(frame["case_id"]) == sorted(whole) and len(frame) == len(whole)
    assert {f.name for f in out.iterdir()} >= {
        "results.csv",
        "results.jsonl",
        "benchmark.json",
        "claims.md",
        "run.json",
    }
    assert set(frame["shard"]) <= {"1/3", "2/3", "3/3"} and not frame["mixed_machines"].any()
    assert (frame["run_id"] == "merged").all() and frame["samples_ms"].map(len).gt(0).all()
    # Each group's rows come from one shard, so each speedup is a same-machine, same-run ratio.
    assert frame.assign(group=frame["case_id"].map(_group)).groupby("group")["shard"].nunique().eq(1).all()
    bench = json.loads((out / "benchmark.json").read_text())
    assert len(bench["benchmarks"]) == len(whole)
    manifest = Manifest.read(out)
    assert manifest.shard is None and len(manifest.merged_from) == 3
    # Each shard's manifest records its allocator variables; the merged one names each shard's.
    assert Manifest.read(sharded / "part2").environment["MALLOC_PERTURB_"] == SHARD_2_PERTURB
    others = os.environ.get("MALLOC_PERTURB_", "(unset)")
    expected = "; ".join(f"shard {k}/3: {SHARD_2_PERTURB if k == 2 else others}" for k in (1, 2, 3))
    assert manifest.environment["MALLOC_PERTURB_"] == (
        SHARD_2_PERTURB if others == SHARD_2_PERTURB else expected
    )


def test_a_sharded_and_merged_run_reports_as_the_unsharded_run(sharded, tmp_path):
    """Same recommendations (per model, device, mode, input), same grid, same cases not passed: only
    the measured numbers differ."""
    from optbench.report.recommend import recommend
    from optbench.report.tables import grid, not_passed

    merged = tmp_path / "merged"
    assert main(["merge", *(str(sharded / f"part{k}") for k in (1, 2, 3)), "--out", str(merged)]) == EXIT_OK
    out = run_bench(*RUN, "--results-dir", str(tmp_path / "results"), "--run-id", "whole")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    whole = tmp_path / "results" / "runs" / "whole"
    for run in (merged, whole):
        assert main(["report", str(run)]) == EXIT_OK
    a, b = load(merged), load(whole)

    def keys(frame):
        return sorted((r.model, r.device, r.mode, r.batch_size, r.input_shape) for r in recommend(frame))

    assert keys(a) == keys(b) and len(keys(a)) == 4
    grids = grid(a), grid(b)
    assert list(grids[0].columns) == list(grids[1].columns)
    shape = ["model", "device", "mode", "bs"]
    assert sorted(map(tuple, grids[0][shape].values)) == sorted(map(tuple, grids[1][shape].values))
    assert sorted(not_passed(a)["case_id"]) == sorted(not_passed(b)["case_id"])
    sections = [line for line in (merged / "report.md").read_text().splitlines() if line.startswith("## ")]
    assert sections == [
        line for line in (whole / "report.md").read_text().splitlines() if line.startswith("## ")
    ]


def _copy(sharded, tmp_path, name, k, **changes):
    folder = tmp_path / name
    shutil.copytree(sharded / f"part{k}", folder)
    manifest = Manifest.read(folder)
    for key, value in changes.items():
        setattr(manifest, key, value)
    manifest.write(folder)
    return str(folder)


def _refused(args, tmp_path, message, capsys):
    out = tmp_path / "out"
    assert main(["merge", *args, "--out", str(out)]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists() and not any(p.name.startswith(".out") for p in tmp_path.iterdir())


def test_merge_refuses_shards_that_do_not_make_one_run(sharded, tmp_path, capsys):
    parts = [str(sharded / f"part{k}") for k in (1, 2, 3)]
    _refused(parts[:2], tmp_path, "shards leave a gap: part 3 of 3 is missing", capsys)
    _refused([*parts, parts[0]], tmp_path, "shards overlap: part 1 of 3 is given more than once", capsys)
    other = _copy(sharded, tmp_path, "other-commit", 3, git_sha="0123456789ab")
    _refused([*parts[:2], other], tmp_path, "shards of different commits do not merge", capsys)
    config = Manifest.read(sharded / "part3").config | {"profile": "full"}
    changed = _copy(sharded, tmp_path, "other-config", 3, config=config)
    _refused([*parts[:2], changed], tmp_path, "ran different configurations (profile)", capsys)
    empty = _copy(sharded, tmp_path, "no-results", 3)
    for name in ("results.csv", "results.jsonl"):
        (tmp_path / "no-results" / name).unlink()
    _refused([*parts[:2], empty], tmp_path, "no results.csv or results.jsonl in", capsys)
    (tmp_path / "out").mkdir()
    assert main(["merge", *parts, "--out", str(tmp_path / "out")]) == EXIT_USAGE
    assert "already exists" in capsys.readouterr().err


def test_bad_shard_option_is_a_usage_error_and_writes_nothing(tmp_path):
    out = run_bench("bench/", "--shard", "4/3", "--results-dir", str(tmp_path / "r"))
    assert out.returncode == pytest.ExitCode.USAGE_ERROR
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert lines == ["ERROR: --shard takes K/N with 1 <= K <= N, got '4/3'"]
    assert not (tmp_path / "r").exists()


def test_merge_and_the_shard_plan_import_no_torch():
    import subprocess
    import sys

    code = "import sys, optbench.cli, optbench.results.merge, optbench.matrix.shard; print('torch' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
    )
