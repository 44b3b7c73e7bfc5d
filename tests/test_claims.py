"""The claims table, from synthetic rows: verdicts, the recipe chosen, and the CLI."""

import pandas as pd

from optbench.cli import EXIT_OK, EXIT_USAGE, main
from optbench.report.claims import claims_markdown, findings
from optbench.results import COLUMN_NAMES


def row(technique, family, size, speedup, low, high, status="passed", delta=0.0, model="m", device="cpu"):
    return {
        "model": model,
        "device": device,
        "mode": "inference",
        "technique": technique,
        "family": family,
        "status": status,
        "size_reduction": size,
        "speedup": speedup,
        "speedup_ci95_low": low,
        "speedup_ci95_high": high,
        "top1_delta": delta,
    }


def edge(frame):
    return findings(pd.DataFrame(frame))[0][1]


def test_the_best_recipe_within_the_floor_decides():
    rows = [
        row("eager", "baseline", 0, 1, 1, 1),
        row("prune_channels_50+int8_static_fx", "pruning+quantization", 93.8, 10.9, 10.1, 11.5, delta=-0.006),
        row("prune_channels_30+int8_static_fx", "pruning+quantization", 88.0, 8.0, 7.5, 8.5),
        # Faster still, but outside the accuracy floor: never chosen.
        row(
            "prune_l1_90+int8_static_fx",
            "pruning+quantization",
            95.0,
            12.0,
            11.0,
            13.0,
            status="fail_accuracy",
        ),
        row("int8_static_fx", "quantization", 75.0, 6.0, 5.8, 6.2),  # no pruning: not this claim
    ]
    (found,) = edge(rows)
    assert found.verdict == "holds"
    assert found.evidence.startswith("prune_channels_50+int8_static_fx: 94% smaller, 10.90x [10.10, 11.50]")
    assert "top-1 -0.6 points" in found.evidence


def test_missed_targets_and_unclear_intervals():
    (small_only,) = edge([row("prune_l1_70+int8_dynamic", "pruning+quantization", 80.0, 1.3, 1.2, 1.4)])
    assert small_only.verdict == "does not hold" and "80% smaller, 1.30x" in small_only.evidence
    (unclear,) = edge([row("p+q", "pruning+quantization", 75.0, 1.55, 1.4, 1.7)])
    assert unclear.verdict == "unclear"


def test_everything_outside_the_floor_or_absent():
    (lost,) = edge(
        [row("p+q", "pruning+quantization", 90.0, 3.0, 2.9, 3.1, status="fail_accuracy", delta=-0.05)]
    )
    assert lost.verdict == "does not hold" and "lost more accuracy than the floor allows" in lost.evidence
    (failed,) = edge([row("p+q", "pruning+quantization", None, None, None, None, status="failed")])
    assert failed.verdict == "no evidence in this run"
    (none,) = edge([row("int8_dynamic", "quantization", 70.0, 2.0, 1.9, 2.1)])
    assert none.verdict == "no evidence in this run"


def test_one_finding_per_model_and_device():
    rows = [
        row("p+q", "pruning+quantization", 90.0, 3.0, 2.9, 3.1, model="a"),
        row("p+q", "pruning+quantization", 50.0, 3.0, 2.9, 3.1, model="b"),
    ]
    found = edge(rows)
    assert [(f.model, f.verdict) for f in found] == [("a", "holds"), ("b", "does not hold")]


def test_markdown_names_every_claim_and_says_no_evidence():
    text = claims_markdown(pd.DataFrame([row("p+q", "pruning+quantization", 90.0, 3.0, 2.9, 3.1)]))
    assert (
        "| Pruning plus quantization made a model 70% smaller and 50% faster at inference | m | cpu | **holds**"
        in text
    )
    assert text.count("**no evidence in this run**") == 2  # mixed precision training, data pipeline


def test_cli_prints_and_writes_claims(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    frame = pd.DataFrame([row("p+q", "pruning+quantization", 90.0, 3.0, 2.9, 3.1)]).reindex(
        columns=COLUMN_NAMES
    )
    frame.to_csv(run / "results.csv", index=False)
    assert main(["claims", str(run)]) == EXIT_OK
    printed = capsys.readouterr().out
    assert "**holds**" in printed
    assert (run / "claims.md").read_text() == printed
    assert main(["claims", str(tmp_path / "missing")]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("optbench: error: ")


def training_row(technique, family, speedup, low, high, status="passed", mode="training", **extra):
    return {
        "model": "resnet18",
        "device": "cpu",
        "mode": mode,
        "batch_size": 8,
        "technique": technique,
        "family": family,
        "status": status,
        "speedup": speedup,
        "speedup_ci95_low": low,
        "speedup_ci95_high": high,
        **extra,
    }


def claim(frame, name):
    return next(found for c, found in findings(pd.DataFrame(frame)) if c.name == name)


def test_mixed_precision_training_claim_takes_the_fastest_precision_row_that_learned():
    rows = [
        training_row("eager", "baseline", 1, 1, 1),
        training_row(
            "bf16_autocast", "precision", 1.6, 1.5, 1.7, converge_top1=0.93, converge_top1_fp32=0.925
        ),
        training_row(
            "channels_last+bf16_autocast",
            "layout+precision",
            2.4,
            2.2,
            2.6,
            converge_top1=0.92,
            converge_top1_fp32=0.925,
        ),  # fmt: skip
        # faster still, but it diverged: never chosen
        training_row("fp16_autocast", "precision", 3.0, 2.9, 3.1, status="diverged"),
        training_row("compile", "compile", 5.0, 4.0, 6.0),  # not mixed precision
    ]
    (found,) = claim(rows, "mixed_precision_training")
    assert found.verdict == "holds" and found.model == "resnet18"
    assert found.evidence.startswith("bs8 channels_last+bf16_autocast: 2.40x [2.20, 2.60]")
    assert "short-training top-1 0.920" in found.evidence
    (slow,) = claim(rows[:2], "mixed_precision_training")
    assert slow.verdict == "does not hold"
    (none,) = claim(
        [training_row("bf16_autocast", "precision", 1, 1, 1, status="diverged")], "mixed_precision_training"
    )
    assert none.verdict == "no evidence in this run" and "diverged" in none.evidence
    # Faster, but its short training learned less than 0.99 x fp32's: the claim does not hold.
    lost = [
        training_row(
            "bf16_autocast", "precision", 2.5, 2.4, 2.6, converge_top1=0.80, converge_top1_fp32=0.925
        )
    ]
    (weak,) = claim(lost, "mixed_precision_training")
    assert weak.verdict == "does not hold" and "below 0.99 x fp32's 0.925" in weak.evidence
    # No short training (--converge-steps 0): no evidence it still learns.
    (blind,) = claim([training_row("bf16_autocast", "precision", 2.5, 2.4, 2.6)], "mixed_precision_training")
    assert blind.verdict == "no evidence in this run"


def test_a_claim_needs_accuracy_evidence_within_the_floor():
    rows = [row("eager", "baseline", 0, 1, 1, 1)]
    fast = row("prune_l1_70+int8_dynamic", "pruning+quantization", 75, 2.0, 1.9, 2.1)
    # Random weights: no top-1 to compare, so speed and size alone never make the claim hold.
    (found,) = claim(rows + [{**fast, "top1_delta": None}], "prune_quantize_edge")
    assert found.verdict == "no evidence in this run" and "accuracy not measured" in found.evidence
    # The fp32 model is at chance on the task: no accuracy evidence either, and the claim says why.
    (blind,) = claim(rows + [{**fast, "accuracy_verdict": "no evidence"}], "prune_quantize_edge")
    assert blind.verdict == "no evidence in this run" and "fp32 model is at chance" in blind.evidence
    # Its paired accuracy interval straddles the floor: not "holds".
    (unclear,) = claim(rows + [{**fast, "accuracy_verdict": "unclear"}], "prune_quantize_edge")
    assert unclear.verdict == "unclear"
    (held,) = claim(rows + [{**fast, "accuracy_verdict": "within floor"}], "prune_quantize_edge")
    assert held.verdict == "holds"


def test_data_pipeline_claim_ignores_settings_that_change_the_training():
    data = [
        training_row(
            "eager", "baseline", 1, 1, 1, mode="data", loader_samples_per_s=100.0, augment=True, shuffle=True
        ),
        training_row(
            "workers_2",
            "data",
            1.5,
            1.3,
            1.7,
            mode="data",
            loader_samples_per_s=180.0,
            augment=True,
            shuffle=True,
        ),
        training_row("no_augment", "data", 3.0, 2.8, 3.2, mode="data", augment=False, shuffle=True),
    ]
    (found,) = claim(data, "data_pipeline")
    assert found.verdict == "unclear"  # 1.5x meets 1/0.7 = 1.43x, its interval's low end does not
    assert found.evidence.startswith("bs8 best workers_2: 1.50x [1.30, 1.70]")
    assert "33% less time per epoch" in found.evidence and "the loader alone 1.80x" in found.evidence
    (missing,) = claim(data[:1], "data_pipeline")
    assert missing.verdict == "no evidence in this run"


def test_mixed_precision_claim_is_no_evidence_when_fp32_short_training_is_at_chance():
    rows = [
        training_row("eager", "baseline", 1, 1, 1, accuracy_verdict="no evidence"),
        training_row(
            "bf16_autocast",
            "precision",
            2.5,
            2.4,
            2.6,
            converge_top1=0.13,
            converge_top1_fp32=0.12,
            accuracy_verdict="no evidence",
        ),
    ]
    (found,) = claim(rows, "mixed_precision_training")
    assert found.verdict == "no evidence in this run"
    assert "fp32's short training is at chance" in found.evidence
