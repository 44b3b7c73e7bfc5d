"""`optbench report` and `optbench publish` on synthetic runs: the recommendation logic, every
section of the Markdown and the HTML, comparisons across runs, bad input, and no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from optbench.cli import EXIT_OK, EXIT_USAGE, main
from optbench.report.plots import KINDS, pareto_front
from optbench.report.publish import END, START
from optbench.report.recommend import CLEAR, KEEP_EAGER, NOTHING, UNCLEAR, Limits, recommend
from optbench.results import ResultsWriter, load


def row(technique: str, speedup: float | None, low: float | None, high: float | None, **extra) -> dict:
    """A passed inference row of resnet18 on cpu at batch 8, with raw samples that fit its speedup."""
    rng = np.random.default_rng(abs(hash(technique)) % 2**32)
    median = 100.0 / (speedup or 1.0)
    base = {
        "run_id": "r",
        "case_id": f"{extra.get('model', 'resnet18')}-{technique}-{extra.get('device', 'cpu')}-bs8",
        "test": "inference",
        "model": "resnet18",
        "technique": technique,
        "family": {"eager": "baseline", "bf16_autocast": "precision", "channels_last": "layout"}.get(
            technique.split("+")[0], "quantization"
        ),
        "device": "cpu",
        "device_name": "Test CPU",
        "mode": "inference",
        "batch_size": 8,
        "input_shape": "3x224x224",
        "status": "passed",
        "latency_ms_median": median,
        "speedup": speedup,
        "speedup_ci95_low": low,
        "speedup_ci95_high": high,
        "top1": 0.95,
        "top1_fp32": 0.95,
        "top1_delta": 0.0,
        "top1_ratio": 1.0,
        "accuracy_floor": 0.99,
        "size_compressed_bytes": 40 * 2**20,
        "peak_mem_mb": 900.0,
        "pct_of_peak": 40.0 * (speedup or 1.0),
        "peak_dtype": "float32",
        "torch_version": "2.14.1",
        "machine_fingerprint": "abc",
        "git_sha": "0123456789abcdef",
        "timestamp": "2026-12-03T10:00:00+00:00",
        "samples_ms": list(median * (1 + 0.02 * rng.standard_normal(30))),
    }
    base.update(extra)
    return base


SECTIONS = (
    "## Recommendation per model and device",
    "## Comparison grid",
    "## Skipped and failed cases",
    "## Environment",
)
"""The Markdown report's sections, each run's report has them all."""


def write_run(folder: Path, rows: list[dict]) -> Path:
    writer = ResultsWriter(folder)
    for r in rows:
        writer.append(r)
    writer.close()
    return folder


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


# --- the recommendation -----------------------------------------------------------------------


def test_a_clear_winner_is_recommended_with_runner_up_and_margin():
    (rec,) = recommend(
        frame(
            [
                row("eager", 1.0, 1.0, 1.0),
                row("bf16_autocast", 2.5, 2.4, 2.6),
                row("channels_last", 1.4, 1.3, 1.5),
            ]
        )
    )
    assert rec.verdict == CLEAR
    assert rec.technique == "bf16_autocast"
    assert rec.runner_up is not None and rec.runner_up.technique == "channels_last"
    assert rec.margin == pytest.approx(2.5 / 1.4)


def test_overlapping_intervals_are_no_clear_winner():
    (rec,) = recommend(
        frame(
            [
                row("eager", 1.0, 1.0, 1.0),
                row("bf16_autocast", 1.52, 1.40, 1.65),
                row("channels_last", 1.48, 1.35, 1.60),
            ]
        )
    )
    assert rec.verdict == UNCLEAR
    assert rec.technique == "bf16_autocast"  # still named: the leader of the tie
    assert "overlap" in rec.reason


def test_a_winner_whose_interval_holds_one_is_no_clear_gain_over_eager():
    (rec,) = recommend(frame([row("eager", 1.0, 1.0, 1.0), row("channels_last", 1.05, 0.97, 1.12)]))
    assert rec.verdict == UNCLEAR
    assert rec.runner_up is not None and rec.runner_up.technique == "eager"
    assert "reaches within 3% of 1.0" in rec.reason


def test_a_gain_shown_only_within_the_margin_is_no_clear_gain():
    """[1.01, 1.06] is above 1.0 but not above 1.03: a gain of under 3% is not worth a technique."""
    (rec,) = recommend(frame([row("eager", 1.0, 1.0, 1.0), row("channels_last", 1.04, 1.01, 1.06)]))
    assert rec.verdict == UNCLEAR and "reaches within 3% of 1.0" in rec.reason
    (rec,) = recommend(frame([row("eager", 1.0, 1.0, 1.0), row("channels_last", 1.08, 1.04, 1.12)]))
    assert rec.verdict == CLEAR


def test_nothing_faster_than_eager_keeps_eager():
    (rec,) = recommend(frame([row("eager", 1.0, 1.0, 1.0), row("channels_last", 0.8, 0.75, 0.85)]))
    assert rec.verdict == KEEP_EAGER
    assert rec.technique == "eager"


def test_everything_failing_is_nothing_qualifies_with_the_reasons():
    rows = [
        row("eager", None, None, None, status="failed"),
        row("bf16_autocast", None, None, None, status="oom"),
        row("int8_static_fx", 4.0, 3.8, 4.2, status="fail_accuracy", top1_ratio=0.9),
    ]
    (rec,) = recommend(frame(rows))
    assert rec.verdict == NOTHING and rec.technique is None
    assert rec.excluded == {
        "failed": ["eager"],
        "oom": ["bf16_autocast"],
        "below accuracy floor": ["int8_static_fx"],
    }
    assert "below accuracy floor: int8_static_fx" in rec.reason


def test_an_accuracy_floor_that_nothing_meets():
    rows = [
        row("eager", None, None, None, status="skipped"),
        row("int8_static_fx", 4.0, 3.8, 4.2, top1_ratio=0.995),
        row("prune_l1_50", 1.2, 1.1, 1.3, top1_ratio=0.99),
    ]
    assert recommend(frame(rows))[0].technique == "int8_static_fx"  # each row's own floor (0.99): passes
    (rec,) = recommend(frame(rows), Limits(accuracy_floor=0.999))
    assert rec.verdict == NOTHING
    assert sorted(rec.excluded["below accuracy floor"]) == ["int8_static_fx", "prune_l1_50"]


def test_size_and_memory_limits_rule_out_techniques():
    rows = [
        row("eager", 1.0, 1.0, 1.0),
        row("bf16_autocast", 2.5, 2.4, 2.6, peak_mem_mb=2000.0),
        row("int8_static_fx", 2.0, 1.9, 2.1, size_compressed_bytes=10 * 2**20),
    ]
    (rec,) = recommend(frame(rows), Limits(max_memory_mb=1000))
    assert rec.technique == "int8_static_fx" and rec.excluded == {"over memory limit": ["bf16_autocast"]}
    (rec,) = recommend(frame(rows), Limits(max_size_mb=20))
    assert rec.technique == "int8_static_fx"
    assert rec.excluded == {"over size limit": ["eager", "bf16_autocast"]}


def test_one_recommendation_per_model_device_mode_and_input():
    rows = [row("eager", 1.0, 1.0, 1.0), row("bf16_autocast", 2.0, 1.9, 2.1)]
    rows += [row("eager", 1.0, 1.0, 1.0, device="cuda"), row("bf16_autocast", 3.0, 2.9, 3.1, device="cuda")]
    rows += [row("eager", 1.0, 1.0, 1.0, mode="training")]
    keys = [(r.device, r.mode, r.technique) for r in recommend(frame(rows))]
    assert keys == [
        ("cpu", "inference", "bf16_autocast"),
        ("cuda", "inference", "bf16_autocast"),
        ("cpu", "training", "eager"),
    ]


def test_pareto_front_keeps_only_undominated_points():
    points = [(0.0, 1.0), (0.0, 1.5), (0.5, 1.2), (1.0, 3.0), (2.0, 2.0)]
    assert pareto_front(points) == [1, 3]


# --- the report ---------------------------------------------------------------------------------


@pytest.fixture
def run_dir(tmp_path) -> Path:
    rows = [
        row("eager", 1.0, 1.0, 1.0),
        row(
            "bf16_autocast",
            2.5,
            2.4,
            2.6,
            top1=0.94,
            top1_delta=-0.01,
            top1_ratio=0.9895,
            status="fail_accuracy",
        ),
        row("channels_last", 1.4, 1.3, 1.5),
        row(
            "int8_static_fx",
            3.0,
            2.8,
            3.2,
            top1=0.948,
            top1_delta=-0.002,
            top1_ratio=0.998,
            size_compressed_bytes=10 * 2**20,
        ),
        row(
            "compile",
            None,
            None,
            None,
            status="skipped",
            reason="torch.compile needs a C compiler",
            samples_ms=None,
        ),
        row("eager", 1.0, 1.0, 1.0, model="lstm_classifier", input_shape="seq64"),
        row("int8_dynamic", 1.3, 1.2, 1.4, model="lstm_classifier", input_shape="seq64"),
    ]
    for r in rows:
        r["case_id"] = f"{r['model']}-{r['technique']}-{r['device']}-bs8"
    return write_run(tmp_path / "runs" / "r1", rows)


def test_report_writes_markdown_and_html_with_every_section(run_dir, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["report", str(run_dir), "--out", str(out)]) == EXIT_OK
    markdown = (out / "report.md").read_text()
    for section in SECTIONS:
        assert section in markdown
    # bf16 is faster but below the floor: int8 static is recommended, clearly ahead of channels_last.
    assert (
        "| resnet18 | cpu | inference | 8 | 3x224x224 | int8_static_fx | 3.00x [2.77, 3.23] | recommended |"
        in markdown
    )
    assert "| lstm_classifier | cpu | inference | 8 | seq64 | int8_dynamic |" in markdown
    assert (
        "2.50x [2.40, 2.60], -1.0 pt (below floor)" in markdown
    )  # the grid cell: speedup, interval, accuracy
    assert "| resnet18-compile-cpu-bs8 | skipped | torch.compile needs a C compiler |" in markdown
    assert "| torch | 2.14.1 |" in markdown
    page = (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    for loads in ('src="http', "src='http", 'href="http', "url(http", '<link rel="stylesheet'):
        assert loads not in page  # self-contained: opens offline
    assert 'id="recommendations"' in page and 'data-technique="int8_static_fx"' in page
    for kind in KINDS:
        assert f'data-plot="{kind}" data-model="resnet18"' in page
    for select in ("filter-model", "filter-device", "filter-family"):
        assert f'id="{select}"' in page
    assert "<h2>Every case</h2>" in page and "<h2>Skipped and failed cases</h2>" in page
    assert str(out / "report.md") in capsys.readouterr().out


def test_report_of_one_run_goes_beside_its_results_by_default(run_dir):
    assert main(["report", str(run_dir)]) == EXIT_OK
    assert (run_dir / "report.md").exists() and (run_dir / "report.html").exists()


def test_report_compares_runs_side_by_side(run_dir, tmp_path):
    gpu_rows = [
        row("eager", 1.0, 1.0, 1.0, device="cuda", latency_ms_median=10.0),
        row("bf16_autocast", 3.0, 2.9, 3.1, device="cuda", latency_ms_median=10.0 / 3),
    ]
    gpu = write_run(tmp_path / "runs" / "gpu", gpu_rows)
    out = tmp_path / "both"
    assert main(["report", str(run_dir), str(gpu), "--out", str(out)]) == EXIT_OK
    markdown = (out / "report.md").read_text()
    assert "## Across runs" in markdown and "## Recommendation per model and device (gpu)" in markdown
    line = next(x for x in markdown.splitlines() if x.startswith("| resnet18 | eager |"))
    # eager: 100 ms on the cpu run, 10 ms on the gpu run: ratio 0.1
    assert "| cpu | 100 | 1 | cuda | 10 | 1 | 0.1 |" in line
    # bf16 passed on the gpu run only (below the floor on the cpu run): not side by side
    assert "| resnet18 | bf16_autocast |" not in markdown.split("## Across runs")[1].split("##")[0]


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "out"
    assert main(["report", str(empty), "--out", str(out)]) == EXIT_USAGE
    assert "no results.csv or results.jsonl" in capsys.readouterr().err
    (empty / "results.jsonl").write_text("")
    assert main(["report", str(empty), "--out", str(out)]) == EXIT_USAGE
    (empty / "results.jsonl").write_text('{"case_id": "a", "status": "pass')  # truncated
    assert main(["report", str(empty), "--out", str(out)]) == EXIT_USAGE
    (empty / "results.jsonl").unlink()
    (empty / "results.csv").write_text("run_id,case_id,status\n")  # a header and no rows
    assert main(["report", str(empty), "--out", str(out)]) == EXIT_USAGE
    assert "has no rows" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing"), "--out", str(out)]) == EXIT_USAGE
    assert main(["report", str(empty), "--accuracy-floor", "1.5"]) == EXIT_USAGE
    assert not out.exists()


def test_report_imports_no_torch(run_dir, tmp_path):
    code = (
        "import sys; from optbench.cli import main; "
        f"rc = main(['report', {str(run_dir)!r}, '--out', {str(tmp_path / 'o')!r}]); "
        "assert rc == 0, rc; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_publish_refreshes_the_folder_and_the_readme_block(run_dir, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# Project\n\nintro\n\n{START}\nold table\n{END}\n\nmore text\n")
    folder = tmp_path / "results" / "published"
    assert main(["publish", str(run_dir), "--dir", str(folder), "--readme", str(readme)]) == EXIT_OK
    assert (folder / "report.md").exists() and (folder / "report.html").exists()
    text = readme.read_text()
    assert (
        "old table" not in text and text.startswith("# Project\n\nintro\n") and text.endswith("more text\n")
    )
    block = text.split(START)[1].split(END)[0]
    assert "[results/published/report.html](results/published/report.html)" in block
    assert "| resnet18 | cpu | inference | 8 | 3x224x224 | int8_static_fx |" in block
    assert "commit 0123456789ab" in block


def test_publish_says_a_stopped_run_is_part_of_its_matrix_and_names_the_cpu(run_dir, tmp_path):
    """A run stopped early publishes what it measured, saying how much of its matrix that is."""
    import json

    rows = pd.read_csv(run_dir / "results.csv")
    rows["cpu_capability"], rows["cpu_isa"] = "AVX512", "avx2 avx512f"
    rows.to_csv(run_dir / "results.csv", index=False)
    (run_dir / "results.jsonl").unlink(missing_ok=True)  # the CSV is the one the reader takes then
    manifest = run_dir / "run.json"
    data = json.loads(manifest.read_text()) if manifest.exists() else {"run_id": "r1", "cases": []}
    data.update(matrix_cases=len(rows) + 5, cases=list(rows["case_id"]) + [f"x{i}" for i in range(5)])
    data.setdefault("config", {})
    data.setdefault("git_sha", "0123456789ab")
    manifest.write_text(json.dumps(data))
    readme = tmp_path / "README.md"
    readme.write_text(f"{START}\n{END}\n")
    assert main(["publish", str(run_dir), "--dir", str(tmp_path / "pub"), "--readme", str(readme)]) == EXIT_OK
    block = readme.read_text()
    assert f"after {len(rows)} of its {len(rows) + 5} cases" in block
    assert "(AVX512; avx2 avx512f)" in block


def test_publish_without_the_readme_markers_writes_nothing(run_dir, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    folder = tmp_path / "published"
    assert main(["publish", str(run_dir), "--dir", str(folder), "--readme", str(readme)]) == EXIT_USAGE
    assert "no published block" in capsys.readouterr().err
    assert not folder.exists() and readme.read_text() == "# no markers\n"


def test_a_run_with_training_and_data_rows_reports_them(tmp_path):
    rows = [
        row("eager", 1.0, 1.0, 1.0, mode="training", converge_top1_delta=0.0, top1=None, top1_delta=None),
        row(
            "bf16_autocast",
            1.6,
            1.5,
            1.7,
            mode="training",
            converge_top1_delta=-0.004,
            top1=None,
            top1_delta=None,
        ),
        row("workers_0", 1.0, 1.0, 1.0, mode="data", family="data", top1=None, top1_delta=None),
        row("decode_jpeg", 1.07, 1.01, 1.14, mode="data", family="data", top1=None, top1_delta=None),
    ]
    for r in rows:
        r["case_id"] = f"resnet18-{r['technique']}-cpu-bs8-{r['mode']}"
    run = write_run(tmp_path / "mixed", rows)
    assert main(["report", str(run)]) == EXIT_OK
    markdown = (run / "report.md").read_text()
    assert (
        "| resnet18 | cpu | training | 8 | 3x224x224 | bf16_autocast | 1.60x [1.50, 1.70] | recommended |"
        in markdown
    )  # one candidate: its interval needs no widening
    assert "1.60x [1.50, 1.70], -0.4 pt" in markdown  # training: top-1 change after the short training
    assert "| resnet18 | cpu | data | 8 |" in markdown
    assert load(run)["mode"].tolist() == ["training", "training", "data", "data"]


def test_eager_stays_the_reference_when_a_limit_excludes_it():
    """A lone candidate at [0.9, 1.2] once a size limit left eager out: not recommended."""
    rows = [
        row("eager", 1.0, 1.0, 1.0),
        row("int8_static_fx", 1.05, 0.9, 1.2, size_compressed_bytes=10 * 2**20),
    ]
    (rec,) = recommend(frame(rows), Limits(max_size_mb=20))
    assert rec.excluded == {"over size limit": ["eager"]}
    assert rec.verdict == UNCLEAR and "reaches within 3% of 1.0" in rec.reason


def test_many_candidates_widen_the_intervals_until_the_top_two_overlap():
    leader, second = row("int8_static_fx", 1.30, 1.23, 1.37), row("channels_last", 1.13, 1.08, 1.19)
    two = [row("eager", 1.0, 1.0, 1.0), leader, second]
    assert recommend(frame(two))[0].verdict == CLEAR  # two candidates: apart
    many = two + [row(f"test_{i}", 0.9, 0.85, 0.95) for i in range(20)]
    (rec,) = recommend(frame(many))  # 22 candidates compared: the same two now overlap
    assert rec.verdict == UNCLEAR and rec.technique == "int8_static_fx" and "overlap" in rec.reason
    assert rec.best.low < 1.23 and rec.best.high > 1.37


def test_unclear_or_unmeasured_accuracy_rules_a_candidate_out():
    rows = [
        row("eager", 1.0, 1.0, 1.0),
        row("int8_static_fx", 3.0, 2.8, 3.2, accuracy_verdict="unclear"),
        row("prune_l1_50", 2.0, 1.9, 2.1, top1_delta=None),  # random weights
        row("channels_last", 1.4, 1.3, 1.5, accuracy_verdict="within floor"),
    ]
    (rec,) = recommend(frame(rows))
    assert rec.technique == "channels_last" and rec.verdict == CLEAR
    assert rec.excluded == {"accuracy unclear": ["int8_static_fx"], "accuracy not measured": ["prune_l1_50"]}
    # fp32 at chance on the task: no technique has accuracy evidence, so none is recommended.
    blind = [row("eager", 1.0, 1.0, 1.0)] + [
        row(t, s, s - 0.1, s + 0.1, accuracy_verdict="no evidence")
        for t, s in (("prune_l1_90", 1.5), ("channels_last", 1.4))
    ]
    (rec,) = recommend(frame(blind))
    assert rec.excluded == {"fp32 at chance": ["prune_l1_90", "channels_last"]}
    # Not "keep eager fp32" (that would say nothing is worth it): accuracy cannot tell.
    assert rec.verdict == "no accuracy evidence" and rec.best is None and rec.runner_up is None
    assert "at chance" in rec.reason and "fastest by speed alone: prune_l1_90 1.50x" in rec.reason


def test_a_recommendation_on_the_embedded_task_says_so_in_one_line():
    rows = [
        row("eager", 1.0, 1.0, 1.0),
        row("bf16_autocast", 2.5, 2.4, 2.6, accuracy_source="the embedded task (digits)"),
    ]
    (rec,) = recommend(frame(rows))
    assert rec.reason.endswith(
        "; accuracy measured on the embedded task; pass --data-dir to measure it on your data"
    )
    assert rec.accuracy_source == "the embedded task (digits)"
    mine = [
        row("eager", 1.0, 1.0, 1.0),
        row("bf16_autocast", 2.5, 2.4, 2.6, accuracy_source="your data (/d)"),
    ]
    assert "embedded" not in recommend(frame(mine))[0].reason


def test_hardware_and_kernel_notes_are_said_once_in_the_report_and_the_summary(tmp_path):
    from optbench.report.summary import run_summary

    bf16 = "bf16 pays off with native bf16 (AVX-512 BF16 or AMX), which this CPU lacks"
    slow = "2 int8 depthwise convolution(s) with channel counts that are not multiples of 8 (470)"
    rows = [
        row("eager", 1.0, 1.0, 1.0),
        row("bf16_autocast", 0.2, 0.18, 0.22, hardware_note=bf16),
        row("bf16_autocast", 0.3, 0.28, 0.32, model="resnet50", hardware_note=bf16),
        row("int8_static_fx", 0.5, 0.45, 0.55, kernel_note=slow),
    ]
    for r in rows:
        r["case_id"] = f"{r['model']}-{r['technique']}-cpu-bs8"
    run_dir = write_run(tmp_path / "runs" / "notes", rows)
    out = tmp_path / "report"
    assert main(["report", str(run_dir), "--out", str(out)]) == EXIT_OK
    markdown = (out / "report.md").read_text()
    assert "## Hardware and kernel notes" in markdown
    assert (
        f"| bf16_autocast | hardware | {bf16} | resnet18-bf16_autocast-cpu-bs8, resnet50-bf16_autocast-cpu-bs8 |"
        in markdown
    )
    assert f"| int8_static_fx | kernel | {slow} | resnet18-int8_static_fx-cpu-bs8 |" in markdown
    assert markdown.count(bf16) == 1
    assert "<h2>Hardware and kernel notes</h2>" in (out / "report.html").read_text()
    summary = run_summary(load(run_dir))
    assert "hardware and kernel notes (2), measured anyway:" in summary
    assert f"bf16_autocast (hardware): {bf16}" in summary


def test_a_run_without_notes_has_no_notes_section(run_dir, tmp_path):
    out = tmp_path / "report"
    assert main(["report", str(run_dir), "--out", str(out)]) == EXIT_OK
    assert "Hardware and kernel notes" not in (out / "report.md").read_text()
