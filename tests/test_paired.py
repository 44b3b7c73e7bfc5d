"""`optbench ab`'s timing slices and paired verdicts, on synthetic samples (no timing, no torch)."""

from __future__ import annotations

import numpy as np
import pytest

from optbench.gate.ab import paired_ratios
from optbench.gate.config import GateConfig, Thresholds
from optbench.gate.paired import MIN_PAIRS, decide, signed_rank_p, slice_ratios, split
from optbench.gate.verdicts import IMPROVED, REGRESSED, UNCHANGED, Verdict
from optbench.runner import plain_timer
from optbench.timing import after_rounds, paced_rounds, slice_ends


class FakePacer:
    def __init__(self, slices: int, rounds_per_slice: int = 1) -> None:
        self.slices, self.rounds_per_slice = slices, rounds_per_slice
        self.paused_at: list[int] = []

    def pause(self, samples: int) -> None:
        self.paused_at.append(samples)


def test_slice_ends_cut_rounds_into_near_equal_parts():
    assert slice_ends(16, 4) == [4, 8, 12]
    ends = slice_ends(17, 16)  # every slice one round, one slice two
    assert len(ends) == 15 and sorted(np.diff([0, *ends, 17])) == [1] * 15 + [2]
    assert slice_ends(10, 1) == []
    ends = slice_ends(100, 16)
    parts = np.diff([0, *ends, 100])
    assert len(ends) == 15 and parts.min() >= 6 and parts.max() <= 7


def test_paced_timing_has_a_round_per_slice_and_pauses_between_slices():
    calls: list[str] = []
    pacer = FakePacer(4)
    assert paced_rounds(2, pacer) == 4 and paced_rounds(9, pacer) == 9 and paced_rounds(2, None) == 2
    samples = plain_timer(lambda: calls.append("call"), rounds=2, warmup=1, pacer=pacer)
    assert len(samples) == 4  # raised to one round per slice
    assert pacer.paused_at == [1, 2, 3]
    # 1 warm-up + 4 timed + one untimed call after each of the 3 pauses
    assert len(calls) == 1 + 4 + 3
    assert after_rounds(lambda: None, 10, None) is None
    assert paced_rounds(2, FakePacer(4, rounds_per_slice=3)) == 12 and paced_rounds(20, FakePacer(4, 3)) == 20


def test_split_and_slice_ratios_pair_slice_by_slice():
    base = [10.0, 10.0, 12.0, 12.0, 10.0, 10.0]
    head = [11.0, 11.0, 11.0, 13.2, 13.2, 11.0, 11.0]  # another round count, same three slices
    assert split(base, [2, 4]) == [[10.0, 10.0], [12.0, 12.0], [10.0, 10.0]]
    ratios = slice_ratios(base, [2, 4], head, [3, 5])
    assert ratios == pytest.approx([1.1, 1.1, 1.1])
    assert slice_ratios(base, [2, 4], head, [3]) == []  # not sliced alike: no pairs
    assert slice_ratios(base, [], head, []) == []


def _row(case_id: str, samples: list[float], ends: list[int], round_: int = 1) -> dict:
    return {
        "case_id": case_id,
        "status": "passed",
        "samples_ms": samples,
        "_round": round_,
        "_slice_ends": ends,
    }


def test_paired_ratios_use_slices_and_fall_back_to_one_ratio_per_round():
    sliced = paired_ratios(
        [_row("a", [10.0] * 4, [1, 2, 3]), _row("b", [10.0] * 4, [], 1), _row("b", [10.0] * 4, [], 2)],
        [_row("a", [11.0] * 4, [1, 2, 3]), _row("b", [12.0] * 4, [], 1), _row("b", [13.0] * 4, [], 2)],
    )
    assert sliced["a"] == pytest.approx([1.1] * 4)
    assert sliced["b"] == pytest.approx([1.2, 1.3])  # a base that could not slice: per round


def _verdict(case_id: str) -> Verdict:
    return Verdict(case_id, "latency_ms", UNCHANGED, 10.0, 10.0, 1.0, p_value=0.5)


def _pairs(center: float, spread: float, n: int = 16, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(center * np.exp(rng.normal(0.0, spread, n)))


def _decide(ratios: dict[str, list[float]], config: GateConfig | None = None) -> dict[str, Verdict]:
    config = config or GateConfig()
    verdicts = [_verdict(c) for c in ratios]
    judged = decide(verdicts, ratios, config.correction, config.for_case)
    assert judged == {c for c, r in ratios.items() if len(r) >= MIN_PAIRS}
    return {v.case_id: v for v in verdicts}


def test_a_clear_paired_slowdown_regresses_and_a_speedup_improves():
    found = _decide({"slow": _pairs(1.12, 0.03), "fast": _pairs(0.85, 0.03), "same": _pairs(1.0, 0.03)})
    assert found["slow"].verdict == REGRESSED and found["slow"].ratio == pytest.approx(1.12, abs=0.03)
    assert found["slow"].low < found["slow"].ratio < found["slow"].high
    assert "16 paired slices" in found["slow"].reason
    assert found["fast"].verdict == IMPROVED
    assert found["same"].verdict == UNCHANGED


def test_pure_noise_never_regresses():
    for seed in range(50):
        found = _decide({"noise": _pairs(1.0, 0.05, seed=seed)})
        assert found["noise"].verdict != REGRESSED, found["noise"].reason


def test_a_consistent_change_below_the_ab_threshold_is_unchanged():
    found = _decide({"c": _pairs(1.03, 0.005)})
    assert signed_rank_p(_pairs(1.03, 0.005)) < 0.001
    assert found["c"].verdict == UNCHANGED and "within the 5% threshold" in found["c"].reason
    wider = GateConfig(thresholds=Thresholds(ab_latency_pct=2.0))
    assert _decide({"c": _pairs(1.03, 0.005)}, wider)["c"].verdict == REGRESSED


def test_too_few_pairs_are_left_to_the_pooled_test():
    verdicts = [_verdict("c")]
    assert decide(verdicts, {"c": [1.5] * (MIN_PAIRS - 1)}, "holm", GateConfig().for_case) == set()
    assert verdicts[0].verdict == UNCHANGED and verdicts[0].reason == ""


def test_the_correction_counts_every_paired_case():
    # 8 pairs all slower: exact two-sided p = 2/256 ~ 0.0078, below alpha 0.01 alone ...
    alone = _decide({"c": [1.2] * 4 + [1.25] * 4})
    assert alone["c"].verdict == REGRESSED
    # ... but not once Holm multiplies it by three compared cases.
    three = _decide({"c": [1.2] * 4 + [1.25] * 4, "d": _pairs(1.0, 0.02), "e": _pairs(1.0, 0.02, seed=1)})
    assert three["c"].verdict == UNCHANGED and "not significant" in three["c"].reason
    assert three["c"].p_adjusted == pytest.approx(3 * three["c"].p_value)
