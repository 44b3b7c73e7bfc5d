"""The end-of-run summary marks speedups that are no clear difference from eager fp32."""

import pandas as pd

from optbench.report.summary import run_summary


def _row(technique, speedup, low, high, top1=0.9):
    return {
        "case_id": f"m-{technique}-cpu-bs1", "model": "m", "device": "cpu", "mode": "inference", "batch_size": 1,
        "technique": technique, "status": "passed", "speedup": speedup, "latency_ms_median": 10 / speedup,
        "speedup_ci95_low": low, "speedup_ci95_high": high, "noisy": False, "top1": top1, "top1_delta": 0.0,
        "reason": None,
    }  # fmt: skip


def test_unclear_speedups_are_marked_and_listed_with_their_intervals():
    frame = pd.DataFrame(
        [
            _row("eager", 1.0, 0.97, 1.03),
            _row("channels_last+bf16_autocast", 2.5, 2.3, 2.7),
            _row("compile", 1.02, 0.95, 1.09),
        ]
    )
    text = run_summary(frame)
    grid = next(line for line in text.splitlines() if line.lstrip().startswith("m "))
    assert "1.00x 10ms" in grid and "2.50x 4ms" in grid and "1.02x= 9.8ms" in grid
    assert "no clear difference from eager fp32" in text
    assert "m-compile-cpu-bs1 1.02x [0.95, 1.09]" in text
    assert "m-channels_last+bf16_autocast-cpu-bs1 2.50x" not in text.split("no clear difference")[-1]


def test_rows_above_the_ceiling_are_reported_not_clipped():
    rows = [_row("eager", 1.0, 1.0, 1.0), _row("compile", 1.4, 1.3, 1.5)]
    rows[0].update(pct_of_peak=72.5, peak_dtype="float32")
    rows[1].update(pct_of_peak=100.8, peak_dtype="float32")
    text = run_summary(pd.DataFrame(rows))
    assert "above the measured ceiling (1)" in text and "m-compile-cpu-bs1 101% of float32" in text
    assert "m-eager-cpu-bs1 72" not in text
