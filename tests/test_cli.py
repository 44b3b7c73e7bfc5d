import subprocess
import sys

import pytest

from optbench.cli import main
from optbench.results import ResultsWriter


def test_show_prints_the_comparison_table(tmp_path, capsys):
    writer = ResultsWriter(tmp_path)
    base = {"run_id": "r", "model": "m", "device": "cpu", "mode": "inference", "batch_size": 2}
    writer.append(
        {
            **base,
            "case_id": "m-eager-cpu-bs2",
            "technique": "eager",
            "status": "passed",
            "latency_ms_median": 10.0,
            "speedup": 1.0,
            "noisy": False,
        }
    )
    writer.append(
        {
            **base,
            "case_id": "m-bf16_autocast-cpu-bs2",
            "technique": "bf16_autocast",
            "status": "passed",
            "latency_ms_median": 5.0,
            "speedup": 2.0,
            "noisy": True,
        }
    )
    writer.append(
        {
            **base,
            "case_id": "m-fp16_autocast-cpu-bs2",
            "technique": "fp16_autocast",
            "status": "skipped",
            "reason": "no fp16 on cpu",
        }
    )
    writer.close()
    assert main(["show", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.lstrip().startswith("m "))
    assert "1.00x 10ms" in row and "2.00x 5ms~" in row and "skip" in row
    assert "skipped (1): no fp16 on cpu" in out


def test_show_on_a_missing_path_is_one_line_and_exit_code_2(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "optbench.cli", "show", str(tmp_path / "none")], capture_output=True, text=True
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"optbench: error: no such results file or folder: {tmp_path / 'none'}"
    ]


def test_selfcheck_measures_all_three_ways():
    # Figures only: whether they agree depends on the machine, which a test must not judge.
    from optbench.pytest_plugin.selfcheck import report, run_selfcheck

    result = run_selfcheck("lstm_classifier", batch_size=2, budget=0.1, repeats=1)
    assert set(result["figures_ms"]) == {"optbench", "torch_timer", "perf_counter_loop", "harness_noop"}
    assert all(len(v) == 1 and v[0] > 0 for v in result["figures_ms"].values())
    assert result["harness_overhead"] > 0
    assert "optbench vs torch.utils.benchmark" in report(result)


def test_selfcheck_times_a_stack_on_the_same_prepared_module(registries):
    from optbench.pytest_plugin.selfcheck import CHECKS, report, run_selfcheck

    assert ("resnet50", 8, "eager", 5.0) in CHECKS and any("+" in check[2] for check in CHECKS)
    result = run_selfcheck(
        "tiny_mlp", batch_size=2, budget=0.05, repeats=1, technique="channels_last+bf16_autocast"
    )
    assert set(result["figures_ms"]) == {"optbench", "torch_timer", "perf_counter_loop"}
    assert all(len(v) == 1 and v[0] > 0 for v in result["figures_ms"].values())
    assert result["harness_overhead"] is None
    assert "tiny_mlp channels_last+bf16_autocast, 3x8x8, batch 2" in report(result)


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("results.csv", "", "is empty: no rows to read"),
        ("results.jsonl", "", "is empty: no rows to read"),
        (
            "results.jsonl",
            '{"case_id": "a", "status": "passed"}\n{"case_id": "b", "sta',
            "line 2 is truncated or corrupt",
        ),
        ("results.csv", "\x00\x01\x02\xff\xfe\n\x00", "is not"),
        ("results.csv", "a,b\n1,2\n", "is not an optbench results file: it has no case_id column"),
        ("results.jsonl", "[1, 2]\n", "is not"),
    ],
)
def test_show_on_a_bad_results_file_is_one_line_and_exit_code_2(tmp_path, name, content, message):
    (tmp_path / name).write_bytes(content.encode("latin-1"))
    before = (tmp_path / name).read_bytes()
    out = subprocess.run(
        [sys.executable, "-m", "optbench.cli", "show", str(tmp_path / name)], capture_output=True, text=True
    )
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert (
        len(lines) == 1 and lines[0].startswith(f"optbench: error: {tmp_path / name}") and message in lines[0]
    )
    assert (tmp_path / name).read_bytes() == before  # nothing rewritten


def test_selfcheck_prints_a_verdict_and_its_exit_code_follows_it(monkeypatch, capsys):
    """The verdict logic on given figures (whether a real machine agrees is the benchmark's to say)."""
    import optbench.pytest_plugin.selfcheck as selfcheck

    def fake(model, batch_size, budget, repeats, technique):
        off = 0.01 if model == "close" else 0.08
        return {"model": model, "technique": technique, "input_shape": "3x8x8", "batch_size": batch_size,
                "threads": 2, "repeats": 1, "figures_ms": {"optbench": [1.0]}, "median_ms": {"optbench": 1.0},
                "vs_torch_timer": off, "vs_perf_counter_loop": 0.0, "harness_overhead": None}  # fmt: skip

    monkeypatch.setattr(selfcheck, "run_selfcheck", fake)
    assert selfcheck.main(["--model", "close"]) == 0
    assert "verdict: agrees" in capsys.readouterr().out
    assert selfcheck.main(["--model", "far"]) == 1
    out = capsys.readouterr().out
    assert "verdict: DISAGREES" in out and "selfcheck: FAIL: 0 of 1 checks agree within 3%" in out
