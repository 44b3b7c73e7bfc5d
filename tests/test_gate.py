"""The regression gate on synthetic runs: verdicts from raw samples, corrections for many
comparisons, deterministic metrics, configuration, Markdown, exports and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from optbench.cli import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, main
from optbench.errors import UsageProblem
from optbench.gate.config import GateConfig, Thresholds, parse_gate_config
from optbench.gate.exports import bencher_metric_format, github_action_benchmark
from optbench.gate.render import markdown, verdicts_json
from optbench.gate.verdicts import apply_confirmation, compare, failed, to_confirm
from optbench.results import ResultsWriter, load
from optbench.results.stats import adjust_p as _correct

RNG = np.random.default_rng(0)


def row(technique="eager", median=100.0, n=30, spread=2.0, model="m", samples=None, base_ms=100.0, **extra):
    samples = list(samples if samples is not None else RNG.normal(median, spread, n))
    values = {
        "case_id": f"{model}-{technique}-cpu-bs8",
        "model": model,
        "technique": technique,
        "device": "cpu",
        "mode": "inference",
        "batch_size": 8,
        "input_shape": "3x224x224",
        "weights": "trained",
        "status": "passed",
        "dtype": "float32",
        "model_code_hash": "aaa",
        "technique_code_hash": "bbb",
        "machine_fingerprint": "fp1",
        "samples_ms": samples,
        "latency_ms_median": float(np.median(samples)) if samples else None,
        "baseline_latency_ms": base_ms,
        "top1": 0.95,
        "size_compressed_bytes": 1000.0,
        "params": 100,
        "peak_mem_mb": 500.0,
    }
    values.update(extra)
    return values


def verdicts_of(base_rows, head_rows, config=None):
    found = compare(pd.DataFrame(base_rows), pd.DataFrame(head_rows), config)
    return {(v.case_id.split("-")[1], v.metric): v for v in found}, found


def test_clear_regression_and_clear_improvement():
    v, found = verdicts_of([row(), row("x", 50)], [row(), row("x", 65)])
    slow = v[("x", "latency_ms")]
    assert slow.verdict == "regressed" and slow.ratio == pytest.approx(1.3, rel=0.03)
    assert slow.low < slow.ratio < slow.high and slow.p_adjusted < 1e-6
    assert v[("x", "latency_vs_eager")].verdict == "regressed"
    assert failed(found)
    v, _ = verdicts_of([row(), row("x", 50)], [row(), row("x", 35)])
    assert v[("x", "latency_ms")].verdict == "improved" and "% faster" in v[("x", "latency_ms")].reason


def test_pure_noise_and_small_changes_are_unchanged():
    v, found = verdicts_of([row(), row("x", 50, spread=5)], [row(), row("x", 50, spread=5)])
    assert v[("x", "latency_ms")].verdict == "unchanged" and not failed(found)
    # Significant, but 4% is under the 10% threshold.
    v, _ = verdicts_of([row(), row("x", 50, spread=0.5)], [row(), row("x", 52, spread=0.5)])
    assert v[("x", "latency_ms")].verdict == "unchanged"


def test_too_few_samples_and_a_bimodal_case():
    v, _ = verdicts_of([row(), row("x", n=3)], [row(), row("x", n=3)])
    assert (
        v[("x", "latency_ms")].verdict == "not_comparable"
        and "too few samples" in v[("x", "latency_ms")].reason
    )
    modes = lambda: np.concatenate([RNG.normal(100, 1, 20), RNG.normal(140, 1, 20)])  # noqa: E731
    v, _ = verdicts_of([row(), row("x", samples=modes())], [row(), row("x", samples=modes())])
    assert v[("x", "latency_ms")].verdict == "unchanged"


def test_another_machine_gates_only_the_ratio_to_eager():
    base = [row(), row("x", 50)]
    head = [
        row(median=200, machine_fingerprint="fp2", base_ms=200),
        row("x", 100, machine_fingerprint="fp2", base_ms=200),
    ]
    v, found = verdicts_of(base, head)
    for metric in ("latency_ms", "peak_mem_mb"):  # twice as slow, but on another machine: not judged
        assert v[("x", metric)].verdict == "not_comparable"
        assert v[("x", metric)].reason == "machine changed (fp1 -> fp2)"
    assert v[("x", "latency_vs_eager")].verdict == "unchanged"  # twice as slow, like its eager: no regression
    assert not failed(found)
    text = markdown(found, pd.DataFrame(base), pd.DataFrame(head))
    assert "`machine_fingerprint`: baseline fp1, this run fp2" in text
    # one line for all cases, not two table rows per case
    assert "Not compared in 2 cases: absolute latency and peak memory (machine changed (fp1 -> fp2)" in text
    assert "| latency_ms |" not in text


def test_peak_memory_is_not_compared_when_one_side_prepared_and_the_other_read_the_cache():
    """Measured on the gated selection, identical code: the side that fine-tuned a pruned resnet18
    peaked at 1643 MB, the side that read the fine-tune from the shared cache at 1362 (+21%)."""
    made, read = dict(prepare_cached=False, peak_mem_mb=1643.0), dict(prepare_cached=True, peak_mem_mb=1362.0)
    v, found = verdicts_of([row(), row("x", **read)], [row(), row("x", **made)])
    assert v[("x", "peak_mem_mb")].verdict == "not_comparable" and not failed(found)
    assert "the baseline read the technique's preparation from the cache" in v[("x", "peak_mem_mb")].reason
    # both made it (or both read it): gated as ever, +21% past the 10% tolerance
    v, found = verdicts_of([row(), row("x", **{**made, "peak_mem_mb": 1362.0})], [row(), row("x", **made)])
    assert v[("x", "peak_mem_mb")].verdict == "regressed" and failed(found)
    # a technique without a cached preparation (empty column) is gated as ever
    v, _ = verdicts_of(
        [row(), row("x", prepare_cached=None)], [row(), row("x", prepare_cached=None, peak_mem_mb=900.0)]
    )
    assert v[("x", "peak_mem_mb")].verdict == "regressed"


def test_the_reference_workload_is_gated_on_one_kind_of_machine_only():
    """latency_vs_reference: a case's latency over a fixed fp32 matmul timed beside it. Same
    fingerprint: a real 30% slowdown is caught. Another fingerprint (another ISA, say): not gated, since
    a bf16 or int8 case moves against an fp32 matmul by 10x and more between ISAs."""
    base = [row(reference_ms=2.0), row("x", 50, reference_ms=2.0)]
    same = [row(reference_ms=2.0), row("x", 65, reference_ms=2.0)]
    v, found = verdicts_of(base, same)
    assert v[("x", "latency_vs_reference")].verdict == "regressed" and failed(found)
    assert v[("x", "latency_vs_reference")].ratio == pytest.approx(1.3, rel=0.05)
    head = [
        row(median=180, machine_fingerprint="fp2", base_ms=180, reference_ms=3.6),
        row("x", 117, machine_fingerprint="fp2", base_ms=180, reference_ms=3.6),
    ]
    v, found = verdicts_of(base, head)
    assert v[("x", "latency_vs_reference")].verdict == "not_comparable"
    assert v[("x", "latency_vs_eager")].verdict == "regressed" and failed(found)  # 1.3x its eager's
    text = markdown(found, pd.DataFrame(base), pd.DataFrame(head))
    assert text.splitlines()[2] == (
        "Different machines (fp1 -> fp2): only the machine-independent metrics are gated: the speedup "
        "against eager fp32 (latency_vs_eager), top-1 and size."
    )
    v, _ = verdicts_of([row(), row("x")], [row(), row("x")])  # rows without the column: no such metric
    assert ("x", "latency_vs_reference") not in v


def test_a_latency_regression_fails_only_when_a_second_measurement_confirms_it():
    base = [row(), row("x", 50), row("y", 50)]
    first = [row(), row("x", 70), row("y", 80)]  # both look slower at first
    _, verdicts = verdicts_of(base, first)
    assert to_confirm(verdicts) == ["m-y-cpu-bs8", "m-x-cpu-bs8"]  # worst first
    second = compare(pd.DataFrame(base), pd.DataFrame([row(), row("x", 50.5), row("y", 81)]))
    apply_confirmation(verdicts, second, {"m-x-cpu-bs8", "m-y-cpu-bs8"})
    v = {(x.case_id.split("-")[1], x.metric): x for x in verdicts}
    assert (
        v[("y", "latency_ms")].confirmed is True
        and "measured again: ratio 1.6" in v[("y", "latency_ms")].reason
    )
    assert v[("x", "latency_ms")].confirmed is False and "not confirmed" in v[("x", "latency_ms")].reason
    assert {f.case_id for f in failed(verdicts)} == {"m-y-cpu-bs8"}
    text = markdown(verdicts)
    assert "2 regressed (2 confirmed by a second measurement)" in text.splitlines()[0]
    assert "2 not confirmed" in text.splitlines()[0]
    assert "| regressed (not confirmed): " in text and "| **regressed** (confirmed): " in text
    # Only x measured again and refuted: the run passes; y, not measured again, still fails.
    _, verdicts = verdicts_of(base, first)
    apply_confirmation(verdicts, second, {"m-x-cpu-bs8"})
    assert {f.case_id for f in failed(verdicts)} == {"m-y-cpu-bs8"}
    assert all(x.confirmed is None for x in verdicts if x.case_id == "m-y-cpu-bs8")
    assert json.loads(verdicts_json(verdicts))["verdicts"][0].keys() >= {"confirmed"}


def test_changed_code_new_and_missing_cases():
    v, _ = verdicts_of([row(), row("x")], [row(), row("x", technique_code_hash="ccc"), row("y")])
    assert (
        v[("x", "case")].verdict == "not_comparable"
        and "technique_code_hash changed" in v[("x", "case")].reason
    )
    assert v[("y", "case")].verdict == "new"
    v, _ = verdicts_of([row(), row("z")], [row()])
    assert v[("z", "case")].verdict == "missing"
    skipped = {"status": "skipped", "reason": "fp16_autocast does not run on cpu"}
    v, found = verdicts_of([row(), row("s", **skipped)], [row(), row("s", **skipped)])
    assert v[("s", "status")].verdict == "unchanged" and "m-s-cpu-bs8" not in markdown(found)


@pytest.mark.parametrize("status", ["failed", "oom", "timeout", "nan_output", "diverged"])
def test_a_case_that_stops_working_regresses_with_the_candidates_reason(status):
    # A broken row has no dtype: the code check must not turn it into "not comparable".
    broken = row("x", status=status, reason="RuntimeError: boom", dtype=None, samples=[], top1=None)
    v, found = verdicts_of([row(), row("x")], [row(), broken])
    assert v[("x", "status")].verdict == "regressed"
    assert v[("x", "status")].reason == f"{status}: RuntimeError: boom"
    assert [f.case_id for f in failed(found)] == ["m-x-cpu-bs8"]
    assert not any(f.verdict == "not_comparable" for f in found)
    # ... with changed code too (what a pull request that breaks a technique looks like)
    v, _ = verdicts_of([row(), row("x")], [row(), {**broken, "technique_code_hash": "ccc"}])
    assert v[("x", "status")].verdict == "regressed"
    # and the other way round it newly passes: an improvement
    v, found = verdicts_of([row(), broken], [row(), row("x")])
    assert v[("x", "status")].verdict == "improved" and f"was {status}" in v[("x", "status")].reason
    assert not failed(found)


def test_a_case_below_the_floor_with_changed_code_regresses():
    below = row("x", status="fail_accuracy", reason="top1 0.5 < 0.99 x fp32", technique_code_hash="ccc")
    v, found = verdicts_of([row(), row("x")], [row(), below])
    assert v[("x", "top1")].verdict == "regressed" and "below the accuracy floor" in v[("x", "top1")].reason


def test_a_case_that_disappears_from_a_selection_that_asks_for_it_regresses():
    base = [row(), row("x"), row("s", status="skipped", reason="no cuda")]
    found = compare(pd.DataFrame(base), pd.DataFrame([row()]), asked={"m-x-cpu-bs8", "m-s-cpu-bs8"})
    v = {(f.case_id.split("-")[1], f.metric): f for f in found}
    assert v[("x", "case")].verdict == "regressed" and "disappeared" in v[("x", "case")].reason
    assert v[("s", "case")].verdict == "missing"  # it never worked: nothing stopped working
    # a base row of that id under another identity (another model) is another case: missing
    other = [row(), {**row("x"), "model": "n"}]  # its case id is m-x-cpu-bs8 still
    found = compare(pd.DataFrame(other), pd.DataFrame([row(), row("x")]), asked={"m-x-cpu-bs8"})
    assert {f.verdict for f in found if f.metric == "case"} == {"missing", "new"}
    # not asked for (another selection): missing, as before
    found = compare(pd.DataFrame(base), pd.DataFrame([row()]), asked={"m-eager-cpu-bs8"})
    assert {f.verdict for f in found if f.metric == "case"} == {"missing"}


def test_asked_for_reads_the_selection_from_the_manifests():
    from optbench.gate.verdicts import asked_for
    from optbench.results.manifest import Manifest

    def manifest(cases, shard=None, **config):
        return Manifest("r", "sha", {"profile": "smoke", **config}, cases, len(cases), shard)

    base = manifest(["a", "b"])
    assert asked_for(base, manifest(["a"])) == {"a", "b"}  # same selection: b is still asked for
    assert asked_for(base, manifest(["a"], models="m")) == {"a"}  # another selection
    # the allocator's thresholds change timing, not the selection: b is still asked for
    assert asked_for(manifest(["a", "b"], malloc="inherit"), manifest(["a"], malloc="fixed")) == {"a", "b"}
    assert asked_for(base, manifest(["a"], shard="1/2")) == {"a"}  # one shard asks for its own
    assert asked_for(base, None) is None and asked_for(None, manifest(["a"])) == {"a"}


def test_deterministic_metrics_have_a_direction_and_a_tolerance():
    v, _ = verdicts_of(
        [row(), row("x", top1=0.95, size_compressed_bytes=1000.0, params=100)],
        [row(), row("x", top1=0.94, size_compressed_bytes=1005.0, params=90)],
    )
    assert v[("x", "top1")].verdict == "regressed" and "dropped 1.0 points" in v[("x", "top1")].reason
    assert v[("x", "size_compressed_bytes")].verdict == "unchanged"  # +0.5%, within 1%
    assert v[("x", "params")].verdict == "improved"
    v, _ = verdicts_of([row(), row("x")], [row(), row("x", status="fail_accuracy", reason="top-1 0.5 below")])
    assert v[("x", "top1")].verdict == "regressed" and "accuracy floor" in v[("x", "top1")].reason
    v, _ = verdicts_of([row(), row("x")], [row(), row("x", status="failed", reason="RuntimeError: boom")])
    assert v[("x", "status")].verdict == "regressed"


def test_many_comparisons_are_corrected():
    assert _correct([0.01] * 5, "holm") == pytest.approx([0.05] * 5)
    assert _correct([0.001, 0.04, 0.03], "holm") == pytest.approx([0.003, 0.06, 0.06])
    assert _correct([0.001, 0.04, 0.03], "bh") == pytest.approx([0.003, 0.04, 0.04])
    # 40 cases of pure noise, gated together: no false alarm.
    base = [row()] + [row(f"t{i}", 50, spread=5) for i in range(40)]
    head = [row()] + [row(f"t{i}", 50, spread=5) for i in range(40)]
    _, found = verdicts_of(base, head)
    assert not failed(found)


def test_configuration_overrides_and_acknowledged_regressions():
    config = parse_gate_config(
        {
            "latency_pct": 20,
            "correction": "bh",
            "cases": {"m-x-*": {"latency_pct": 50, "ab_latency_pct": 8}},
            "ignore": {"m-y-*": "known slowdown, issue 12"},
        }
    )
    assert config.thresholds.latency_pct == 20 and config.for_case("m-x-cpu-bs8").latency_pct == 50
    assert config.thresholds.ab_latency_pct == 5 and config.for_case("m-x-cpu-bs8").ab_latency_pct == 8
    v, found = verdicts_of([row(), row("x", 50), row("y", 50)], [row(), row("x", 65), row("y", 65)], config)
    assert v[("x", "latency_ms")].verdict == "unchanged"  # 30% under its own 50%
    assert v[("y", "latency_ms")].verdict == "regressed" and v[("y", "latency_ms")].ignored
    assert not failed(found) and "2 acknowledged" in markdown(found)  # latency and its ratio to eager
    stale = GateConfig(Thresholds(fail_on_improvement_pct=25))
    v, _ = verdicts_of([row(), row("x", 50, spread=0.5)], [row(), row("x", 30, spread=0.5)], stale)
    assert v[("x", "latency_ms")].verdict == "regressed"
    # "x% faster" is in the limit's own measure (base / head - 1): 50 -> 30 ms is about 66.7% faster
    # (the exact figure is the drawn samples' medians')
    found_x = v[("x", "latency_ms")]
    assert found_x.reason.startswith(f"{(found_x.base / found_x.head - 1) * 100:.1f}% faster")
    assert 60 < (found_x.base / found_x.head - 1) * 100 < 73 and "refresh the baseline" in found_x.reason
    under = GateConfig(Thresholds(fail_on_improvement_pct=40))  # 50 -> 38.5 ms: 30% faster, under 40%
    v, _ = verdicts_of([row(), row("x", 50, spread=0.5)], [row(), row("x", 38.5, spread=0.5)], under)
    found_x = v[("x", "latency_ms")]
    assert found_x.verdict == "improved"
    assert found_x.reason == f"{(found_x.base / found_x.head - 1) * 100:.1f}% faster"  # about 29.9%, under 40


@pytest.mark.parametrize(
    "table, message",
    [
        ({"latency": 10}, "unknown key 'latency'"),
        ({"latency_pct": "ten"}, "latency_pct must be a non-negative number"),
        ({"alpha": 2}, "alpha must be between 0 and 1"),
        ({"correction": "bonferroni"}, "correction must be 'holm' or 'bh'"),
        ({"ignore": {"x": 3}}, ".ignore must map case-id patterns"),
    ],
)
def test_bad_configuration_is_one_line(table, message):
    with pytest.raises(UsageProblem, match=message):
        parse_gate_config(table)


def test_each_gate_key_is_declared_once_with_its_check_and_its_docs_row():
    from optbench.gate.config import gate_settings_markdown

    keys = "latency_pct, ab_latency_pct, alpha, accuracy_drop, size_pct, memory_pct, fail_on_improvement_pct"
    with pytest.raises(UsageProblem) as raised:
        parse_gate_config({"latency": 10})
    assert (
        str(raised.value) == f"[tool.optbench.gate]: unknown key 'latency'; valid keys: {keys}, min_samples"
    )
    with pytest.raises(UsageProblem, match=r'cases\."m-\*": alpha must be between 0 and 1, got 0'):
        parse_gate_config({"cases": {"m-*": {"alpha": 0}}})
    with pytest.raises(UsageProblem, match="min_samples must be a non-negative number, got True"):
        parse_gate_config({"min_samples": True})
    config = parse_gate_config({"min_samples": 8, "latency_pct": 12, "correction": "bh"})
    assert config.thresholds.min_samples == 8 and isinstance(config.thresholds.min_samples, int)
    assert config.thresholds.latency_pct == 12.0 and isinstance(config.thresholds.latency_pct, float)
    assert config.correction == "bh" and GateConfig().correction == "holm"
    assert Thresholds() == parse_gate_config({}).thresholds
    rows = gate_settings_markdown().splitlines()
    assert rows[0] == "| key | type | default | help |"
    assert [row.split("`")[1] for row in rows[2:]] == [
        *keys.split(", "),
        "min_samples",
        "correction",
        'cases."PATTERN"',
        "ignore",
    ]
    assert rows[2].startswith("| `latency_pct` | number >= 0 | `10.0` | A latency change smaller")
    assert rows[4].startswith("| `alpha` | number in (0, 1) | `0.01` |")
    assert rows[8].startswith("| `fail_on_improvement_pct` | number >= 0 | - |")
    assert rows[10].startswith("| `correction` | `holm` or `bh` | `holm` |")


def test_markdown_and_json_and_exports():
    _, found = verdicts_of([row(), row("x", 50)], [row(), row("x", 65)])
    text = markdown(found)
    assert text.startswith("## optbench gate: **FAIL** — 2 regressed")
    assert "| `m-x-cpu-bs8` | latency_ms | " in text and "% slower (threshold 10%)" in text
    payload = json.loads(verdicts_json(found))
    assert payload["failed"] is True and {v["verdict"] for v in payload["verdicts"]} >= {"regressed"}
    frame = pd.DataFrame(
        [
            row(
                speedup=1.0,
                speedup_ci95_low=1.0,
                speedup_ci95_high=1.0,
                latency_ms_min=95.0,
                latency_ms_p99=105.0,
                latency_ms_iqr=2.0,
                throughput=80.0,
            )
        ]
    )
    bmf = bencher_metric_format(frame)
    assert (
        bmf["m-eager-cpu-bs8"]["latency"]["lower_value"] == 95.0
        and bmf["m-eager-cpu-bs8"]["speedup"]["value"] == 1.0
    )
    smaller = github_action_benchmark(frame)
    assert smaller[0]["unit"] == "ms" and smaller[0]["range"] == "± 1.000"
    assert github_action_benchmark(frame, bigger_is_better=True)[0]["unit"] == "x"


def _run(folder, rows):
    writer = ResultsWriter(folder)
    for r in rows:
        writer.append({k: v for k, v in r.items()})
    writer.close()
    return str(folder)


def test_cli_exit_codes_baseline_save_and_outputs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = _run(tmp_path / "base", [row(), row("x", 50)])
    same = _run(tmp_path / "same", [row(), row("x", 50)])
    slow = _run(tmp_path / "slow", [row(), row("x", 65)])
    assert main(["baseline", "save", base, "--name", "main"]) == EXIT_OK
    saved = tmp_path / "results" / "baselines" / "main"
    assert (saved / "results.jsonl").exists()
    assert main(["compare", str(saved), same]) == EXIT_OK
    assert "**pass**" in capsys.readouterr().out
    outputs = {
        flag: str(tmp_path / f"{flag.strip('-')}.out")
        for flag in ("--markdown", "--json", "--bencher", "--smaller-is-better", "--bigger-is-better")
    }
    assert main(["compare", str(saved), slow, *[x for kv in outputs.items() for x in kv]]) == EXIT_REGRESSION
    assert json.loads((tmp_path / "json.out").read_text())["failed"] is True
    assert "m-x-cpu-bs8" in json.loads((tmp_path / "bencher.out").read_text())
    assert main(["compare", str(tmp_path / "nope"), slow]) == EXIT_USAGE
    assert "no such results file or folder" in capsys.readouterr().err
    assert main(["compare", str(saved), same, "--config", str(tmp_path / "nope.toml")]) == EXIT_USAGE
    assert "--config" in capsys.readouterr().err
    (tmp_path / "pyproject.toml").write_text("[tool.optbench.gate]\nlatency_pct = 'x'\n")
    assert main(["compare", str(saved), slow]) == EXIT_USAGE
    assert "latency_pct must be a non-negative number" in capsys.readouterr().err


def test_cli_compare_fails_on_a_case_that_stopped_working_or_disappeared(tmp_path, capsys):
    from optbench.results.manifest import Manifest

    base = _run(tmp_path / "base", [row(), row("x", 50)])
    broken = row("x", status="failed", reason="RuntimeError: head broke it", dtype=None, samples=[])
    head = _run(tmp_path / "head", [row(), broken])
    assert main(["compare", base, head]) == EXIT_REGRESSION
    out = capsys.readouterr().out
    assert "**FAIL**" in out and "RuntimeError: head broke it" in out
    # A candidate whose manifest asks for m-x but has no row for it: disappeared, a regression.
    gone = _run(tmp_path / "gone", [row()])
    Manifest("gone", "sha", {}, ["m-eager-cpu-bs8", "m-x-cpu-bs8"], 2).write(Path(gone))
    assert main(["compare", base, gone]) == EXIT_REGRESSION
    assert "disappeared" in capsys.readouterr().out
    # Without a manifest that asks for it, it is only missing (another selection): a pass.
    alone = _run(tmp_path / "alone", [row()])
    assert main(["compare", base, alone]) == EXIT_OK


def test_cli_compare_names_runs_timed_under_other_allocator_settings(tmp_path, capsys):
    """The allocator changes absolute latency, never which cases run: the runs are still compared, and
    the summary says what differed."""
    from optbench.results.manifest import Manifest

    cases = ["m-eager-cpu-bs8", "m-x-cpu-bs8"]
    base = _run(tmp_path / "base", [row(), row("x", 50)])
    head = _run(tmp_path / "head", [row(), row("x", 50)])
    Manifest("base", "sha", {"malloc": "inherit"}, cases, 2).write(Path(base))
    Manifest("head", "sha", {"malloc": "fixed"}, cases, 2, environment={"LD_PRELOAD": "libx.so"}).write(
        Path(head)
    )
    assert main(["compare", base, head]) == EXIT_OK
    out = capsys.readouterr().out
    assert "**Timed under other settings** (still gated" in out
    assert "- `malloc`: baseline inherit, this run fixed" in out
    assert "- `LD_PRELOAD`: baseline unset, this run libx.so" in out
    Manifest("head", "sha", {"malloc": "inherit"}, cases, 2).write(Path(head))
    assert main(["compare", base, head]) == EXIT_OK
    assert "Timed under other settings" not in capsys.readouterr().out


def test_runs_with_nothing_to_compare_are_bad_input_never_a_pass(tmp_path, capsys):
    base = _run(tmp_path / "base", [row(), row("x", 50)])
    other = _run(tmp_path / "other", [row(model="n"), row("x", 50, model="n")])
    assert main(["compare", base, other]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "no case in common (2 only in this run, 2 only in the baseline)" in err and err.count("\n") == 1
    changed = _run(tmp_path / "changed", [row(model_code_hash="zzz"), row("x", 50, model_code_hash="zzz")])
    assert main(["compare", base, changed]) == EXIT_USAGE
    assert "no case in common could be compared (2 cases: model_code_hash changed)" in capsys.readouterr().err
    skipped = {"status": "skipped", "reason": "needs a GPU"}
    both = _run(tmp_path / "skip1", [row(**skipped)]), _run(tmp_path / "skip2", [row(**skipped)])
    assert main(["compare", *both]) == EXIT_USAGE
    assert "skipped or failed on both sides" in capsys.readouterr().err


def test_unreadable_truncated_or_newer_baselines_are_one_line_and_overwrite_nothing(tmp_path, capsys):
    base = _run(tmp_path / "base", [row(), row("x", 50)])
    assert main(["baseline", "save", base, "--name", "main", "--dir", str(tmp_path / "b")]) == EXIT_OK
    saved = tmp_path / "b" / "main" / "results.jsonl"
    good = saved.read_bytes()
    capsys.readouterr()

    truncated = tmp_path / "truncated"
    truncated.mkdir()
    (truncated / "results.jsonl").write_bytes(good[: len(good) // 2])
    newer = tmp_path / "newer"
    newer.mkdir()
    lines = [json.loads(line) for line in good.decode().splitlines()]
    (newer / "results.jsonl").write_text(
        "".join(json.dumps({**r, "schema_version": 99}) + "\n" for r in lines)
    )
    folder = tmp_path / "folder"
    (folder / "results.jsonl").mkdir(parents=True)  # unreadable: a folder where the file should be
    empty = tmp_path / "empty"
    ResultsWriter(empty).close()
    cases = {
        truncated: "is truncated or corrupt",
        newer: "written by a newer optbench (results schema 99; this one reads up to 1)",
        folder: "cannot read",
        empty: "no rows",
    }
    for run, message in cases.items():
        assert main(["compare", str(run), base]) == EXIT_USAGE, run
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
        if run is not folder:  # nothing is overwritten: the saved baseline stays as it was
            assert (
                main(["baseline", "save", str(run), "--name", "main", "--dir", str(tmp_path / "b")])
                == EXIT_USAGE
            )
            assert message in capsys.readouterr().err
            assert saved.read_bytes() == good
    (Path(base) / "run.json").write_text('{"schema_version": 7}')
    assert main(["baseline", "save", base, "--name", "main", "--dir", str(tmp_path / "b")]) == EXIT_USAGE
    assert "results schema 7" in capsys.readouterr().err and saved.read_bytes() == good
    (Path(base) / "run.json").write_text('{"schema_version": "two"}')
    assert main(["baseline", "save", base, "--name", "main", "--dir", str(tmp_path / "b")]) == EXIT_USAGE
    assert "schema_version 'two' is not a whole number" in capsys.readouterr().err


def test_the_gate_imports_no_torch():
    import subprocess
    import sys

    code = (
        "import sys, optbench.cli, optbench.results, optbench.results.manifest, optbench.gate.verdicts, "
        "optbench.gate.render, optbench.gate.exports, optbench.gate.config, optbench.ab.driver, "
        "optbench.ab.confirmation, optbench.gate.paired, optbench.ab.lockstep; "
        "print('torch' in sys.modules)"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
    )


def _doctor(src, dst, factor):
    """A copy of a run whose every latency sample is `factor` times what was measured."""
    import shutil

    shutil.copytree(src, dst)
    lines = []
    for line in (dst / "results.jsonl").read_text().splitlines():
        data = json.loads(line)
        if data.get("samples_ms"):
            data["samples_ms"] = [s * factor for s in data["samples_ms"]]
        lines.append(json.dumps(data))
    (dst / "results.jsonl").write_text("\n".join(lines) + "\n")
    return dst


def test_pytest_bench_gates_itself_against_a_baseline(tmp_path):
    from bench_process import run_bench

    args = (
        "bench/test_inference.py", "--models", "resnet18", "--techniques", "eager,channels_last",
        "--weights", "random", "--devices", "cpu", "--time-budget", "0.1", "--timing-shape", "task",
        "--results-dir", str(tmp_path),
    )  # fmt: skip
    first = run_bench(*args, "--run-id", "first")
    assert first.returncode == 0, first.stdout[-2000:]
    runs = tmp_path / "runs"
    # 100x either way, not 5x: the first run may have been timed on a loaded machine (here once 20x
    # its unloaded time), and a later unloaded run must still be far slower than `fast`.
    fast = _doctor(runs / "first", tmp_path / "fast-baseline", 0.01)  # we are 100x slower than it
    slow = _doctor(runs / "first", tmp_path / "slow-baseline", 100.0)  # we are 100x faster than it
    regressed = run_bench(*args, "--run-id", "second", "--optbench-compare", str(fast))
    assert regressed.returncode == 1, regressed.stdout[-3000:]
    assert "optbench gate: **FAIL**" in regressed.stdout and (runs / "second" / "gate.md").exists()
    gate = json.loads((runs / "second" / "gate.json").read_text())
    assert gate["failed"] is True
    # Measured again before failing (within the default budget): still far slower, so confirmed.
    slow_latency = [
        v for v in gate["verdicts"] if v["metric"] == "latency_ms" and v["verdict"] == "regressed"
    ]
    assert slow_latency and all(v["confirmed"] is True for v in slow_latency)
    assert set(load(runs / "second" / "confirm")["case_id"]) == {v["case_id"] for v in slow_latency}
    unconfirmed = run_bench(
        *args, "--run-id", "fifth", "--optbench-compare", str(fast), "--gate-confirm-budget", "0"
    )
    assert unconfirmed.returncode == 1 and not (runs / "fifth" / "confirm").exists()
    assert all(
        v["confirmed"] is None for v in json.loads((runs / "fifth" / "gate.json").read_text())["verdicts"]
    )
    improved = run_bench(*args, "--run-id", "third", "--optbench-compare", str(slow))
    assert improved.returncode == 0, improved.stdout[-3000:]
    assert "optbench gate: **pass**" in improved.stdout
    missing = run_bench(*args, "--run-id", "fourth", "--optbench-compare", str(tmp_path / "nope"))
    assert missing.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--optbench-compare: no such results file or folder" in missing.stdout + missing.stderr
    # A truncated baseline is refused before anything runs, not after the whole run.
    broken = tmp_path / "broken"
    broken.mkdir()
    whole = (runs / "first" / "results.jsonl").read_text()
    (broken / "results.jsonl").write_text(whole[: len(whole) // 2])
    truncated = run_bench(*args, "--run-id", "sixth", "--optbench-compare", str(broken))
    assert truncated.returncode == pytest.ExitCode.USAGE_ERROR
    assert "is truncated or corrupt" in truncated.stdout + truncated.stderr
    assert not (runs / "sixth" / "results.jsonl").exists()
    # A baseline with no case in common is never a pass: pytest's usage-error code, the rows kept.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "results.jsonl").write_text(
        "".join(json.dumps({**json.loads(line), "model": "other"}) + "\n" for line in whole.splitlines())
    )
    unrelated = run_bench(*args, "--run-id", "seventh", "--optbench-compare", str(elsewhere))
    assert unrelated.returncode == pytest.ExitCode.USAGE_ERROR, unrelated.stdout[-3000:]
    assert "optbench gate: error: --optbench-compare: the two runs have no case in common" in unrelated.stdout
    assert len(load(runs / "seventh")) == len(load(runs / "first"))


FAULTY_MODEL = """
import os

import torch
from torch import nn
from optbench import image_classifier, register_model


class Net(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(8, num_classes))

    def forward(self, x):
        fault = os.environ.get("TEST_GATE_FAULT")  # how test_gate breaks this model in one run
        if fault == "raise":
            raise RuntimeError("injected by test_gate")
        if fault == "oom":
            raise torch.OutOfMemoryError("injected by test_gate")
        out = self.body(x)
        return out * float("nan") if fault == "nan" else out


register_model(image_classifier("my_net", Net, resolution=16))
"""


def test_optbench_compare_fails_on_a_case_that_stopped_working(tmp_path):
    """A user's model that breaks in the candidate run fails `--optbench-compare`, with the status and
    the reason of the candidate's row, never as 'not comparable'."""
    from bench_process import run_bench
    from user_repo import user_repo

    (tmp_path / "repo").mkdir()
    repo = user_repo(tmp_path / "repo")
    (repo / "models" / "my_net.py").write_text(FAULTY_MODEL)
    args = (
        "bench/", "--techniques", "eager,channels_last", "--weights", "random", "--devices", "cpu",
        "--time-budget", "0.1", "--timing-shape", "task",
    )  # fmt: skip
    cache = tmp_path / "cache"
    first = run_bench(*args, "--run-id", "base", cwd=repo, cache=cache)
    assert first.returncode == 0, first.stdout[-3000:]
    base = repo / "results" / "runs" / "base"
    for fault, status, reason in (
        ("raise", "failed", "injected by test_gate"),
        ("oom", "oom", "injected by test_gate"),
        ("nan", "nan_output", ""),
    ):
        head = run_bench(
            *args, "--run-id", fault, "--optbench-compare", str(base), cwd=repo, cache=cache,
            env={"TEST_GATE_FAULT": fault},
        )  # fmt: skip
        assert head.returncode == 1, head.stdout[-3000:]
        assert "optbench gate: **FAIL**" in head.stdout
        gate = json.loads((repo / "results" / "runs" / fault / "gate.json").read_text())
        broken = {v["case_id"]: v for v in gate["verdicts"] if v["metric"] == "status"}
        assert set(broken) == {"my_net-eager-cpu-bs8", "my_net-channels_last-cpu-bs8"}, gate["verdicts"]
        for verdict in broken.values():
            assert verdict["verdict"] == "regressed" and verdict["reason"].startswith(f"{status}: ")
            assert reason in verdict["reason"]
        assert not any(v["verdict"] == "not_comparable" for v in gate["verdicts"])


@pytest.mark.parametrize(
    "damage, named",
    [
        ({"latency_ms_median": -3.0}, "latency_ms_median -3.0"),
        ({"samples_ms": [50.0, float("nan"), 51.0]}, "a raw sample of nan ms"),
        ({"speedup": -1.0}, "speedup -1.0"),
    ],
)
def test_impossible_values_are_refused_by_compare_and_report_in_one_line(tmp_path, capsys, damage, named):
    base = _run(tmp_path / "base", [row(), row("x", 50)])
    broken = _run(tmp_path / "broken", [row(), row("x", 50, **damage)])
    assert main(["compare", base, broken]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "row 2 (m-x-cpu-bs8) has " + named in err[0]
    assert main(["report", broken, "--out", str(tmp_path / "report")]) == EXIT_USAGE
    assert named in capsys.readouterr().err
