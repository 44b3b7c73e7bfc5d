"""`optbench ab`'s confirmation on synthetic pairs: which flagged cases are measured again within the
budget, how the second measurement confirms or refutes them, and what a Ctrl-C during it leaves."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from optbench.ab import confirmation as ab_confirm
from optbench.ab.options import AbOptions
from optbench.ab.outcome import AbRun, confirm, confirmation_notes
from optbench.ab.pooling import SessionRow
from optbench.ab.sessions import Measured, Side
from optbench.gate.config import GateConfig
from optbench.gate.verdicts import REGRESSED, UNCHANGED, Verdict, failed

CONFIG = GateConfig()


def _flagged(case_id: str, ratio: float) -> Verdict:
    return Verdict(case_id, "latency_ms", REGRESSED, ratio=ratio, p_value=1e-4, p_adjusted=1e-4, reason="x")


def _pairs(ratio: float, n: int = 16, seed: int = 0) -> list[tuple[list[float], list[float]]]:
    """n pairs of 3 samples per side, head `ratio` times base, with 2% noise."""
    rng = np.random.default_rng(seed)
    return [(list(10 * rng.normal(1, 0.02, 3)), list(10 * ratio * rng.normal(1, 0.02, 3))) for _ in range(n)]


def test_choose_takes_the_worst_first_within_the_budget():
    verdicts = [_flagged("a", 1.10), _flagged("b", 1.30), _flagged("c", 1.20), _flagged("u", 1.5)]
    verdicts.append(Verdict("d", "latency_ms", UNCHANGED, ratio=1.0))
    items = {"a": "t[a]", "b": "t[b]", "c": "t[c]", "u": "t[u]", "d": "t[d]"}
    seconds = {"t[a]": 10.0, "t[b]": 10.0, "t[c]": 30.0, "t[u]": 1.0, "t[d]": 1.0}
    # u was not judged on pairs (pooled verdict): not measured again here; d did not regress.
    plan = ab_confirm.choose(verdicts, {"a", "b", "c", "d"}, items, seconds, start_s=5.0, budget_s=30.0)
    assert plan.cases == ["b", "a"] and plan.items == ["t[b]", "t[a]"]
    assert plan.left_out == ["c"] and plan.estimate_s == 25.0
    assert ab_confirm.choose(verdicts, {"a"}, items, seconds, 5.0, budget_s=0).cases == []


def test_a_regression_seen_again_is_confirmed_and_one_not_seen_is_refuted():
    verdicts = [_flagged("slow", 1.10), _flagged("layout", 1.07)]
    first = {"slow": _pairs(1.10, seed=3), "layout": _pairs(1.07, seed=4)}
    pairs = {"slow": _pairs(1.10, seed=1), "layout": _pairs(1.00, seed=2)}
    again = ab_confirm.judge(verdicts, ["slow", "layout"], first, pairs, CONFIG)
    assert again["slow"].verdict == REGRESSED and again["layout"].verdict == UNCHANGED
    # A session effect of +7% needs the fresh sessions past +3% too: 1.00 leaves 1.035 over both.
    assert 1.02 < again["layout"].ratio < 1.045
    assert [v.confirmed for v in verdicts] == [True, False]
    assert [v.case_id for v in failed(verdicts)] == ["slow"]  # the refuted one no longer fails
    assert "measured again: ratio 1.1" in verdicts[0].reason
    assert "not confirmed: does not fail" in verdicts[1].reason


def test_both_measurements_count_once_each():
    # Live run, 10% injected: 1.086 first, 1.025 in the fresh sessions. Judged alone the second was
    # refuted; together (1.055) the slowdown holds.
    verdicts = [_flagged("slowed", 1.086), _flagged("burst", 1.30)]
    first = {"slowed": _pairs(1.086, seed=5), "burst": _pairs(1.30, seed=6)}
    pairs = {"slowed": _pairs(1.025, seed=7), "burst": _pairs(0.95, seed=8)}
    again = ab_confirm.judge(verdicts, ["slowed", "burst"], first, pairs, CONFIG)
    assert again["slowed"].verdict == REGRESSED and 1.05 < again["slowed"].ratio < 1.06
    assert again["slowed"].p_adjusted < CONFIG.for_case("slowed").alpha
    # 1.30 then 0.95 is 1.11 together, but fresh sessions that run it faster do not confirm a slowdown.
    assert again["burst"].ratio > 1.1 and again["burst"].verdict == UNCHANGED
    assert "not significant" in again["burst"].reason or "do not lean slower" in again["burst"].reason
    assert [v.confirmed for v in verdicts] == [True, False]


def test_a_case_the_second_measurement_could_not_judge_keeps_failing():
    verdicts = [_flagged("crashed", 1.2), _flagged("short", 1.2)]
    first = {"crashed": _pairs(1.2), "short": _pairs(1.2)}
    pairs = {"short": _pairs(1.0, n=3)}  # too few pairs to refute anything; "crashed": none at all
    assert ab_confirm.judge(verdicts, ["crashed", "short"], first, pairs, CONFIG) == {}
    assert [v.confirmed for v in verdicts] == [None, None] and len(failed(verdicts)) == 2


def _rows(case_id: str, samples: list[float], ends: list[int]) -> list[SessionRow]:
    row = {"case_id": case_id, "status": "passed", "samples_ms": samples}
    return [SessionRow(row, round=1, nodeid=f"t[{case_id}]", slice_ends=ends)]


def _measured(tmp: Path, ratio: float) -> Measured:
    sides = {}
    for name, factor in (("base", 1.0), ("head", ratio)):
        flat = [s * factor for b, _ in _pairs(1.0, seed=3) for s in b]
        side = Side(name, "0" * 40, tmp, {}, tmp / "raw" / name, tmp / f"{name}.log")
        side.rows = _rows("m-x-cpu-bs1", flat, [3 * k for k in range(1, 16)])
        sides[name] = side
    return Measured(sides, ["t[m-x-cpu-bs1]"], {"t[m-x-cpu-bs1]": 4.0}, 3.0)


def test_confirm_measures_the_flagged_item_again_and_records_it(tmp_path):
    run = AbRun(AbOptions(base="HEAD"), _measured(tmp_path, 1.2), tmp_path, "a", "b", False, "", 10.0)
    verdicts = [_flagged("m-x-cpu-bs1", 1.06)]
    first = {"m-x-cpu-bs1": _pairs(1.06)}
    asked = []

    def remeasure(items: list[str]) -> Measured:
        asked.append(items)
        return _measured(tmp_path / "second", 1.0)  # the second pair of sessions sees no change

    assert confirm(run, verdicts, {"m-x-cpu-bs1"}, first, CONFIG, remeasure, None) is False
    assert asked == [["t[m-x-cpu-bs1]"]]
    assert verdicts[0].confirmed is False and not failed(verdicts)
    record = run.confirmation
    assert record["cases"] == ["m-x-cpu-bs1"] and record["verdicts"] == {"m-x-cpu-bs1": UNCHANGED}
    assert record["estimate_s"] == 7.0 and len(record["paired_ratios"]["m-x-cpu-bs1"]) == 16
    rows = (tmp_path / "confirm" / "head" / "results.jsonl").read_text().splitlines()
    assert [json.loads(r)["case_id"] for r in rows] == ["m-x-cpu-bs1"]
    (note,) = confirmation_notes(record)
    assert "measured again in a fresh pair of sessions" in note
    assert "`m-x-cpu-bs1` (unchanged, 1.03x over both measurements)" in note and record["ratios"]


def test_ctrl_c_during_the_confirmation_keeps_the_first_verdicts_failing(tmp_path):
    run = AbRun(AbOptions(base="HEAD"), _measured(tmp_path, 1.2), tmp_path, "a", "b", False, "", 10.0)
    verdicts = [_flagged("m-x-cpu-bs1", 1.2)]

    def remeasure(items: list[str]) -> Measured:
        raise KeyboardInterrupt

    first = {"m-x-cpu-bs1": _pairs(1.2)}
    assert confirm(run, verdicts, {"m-x-cpu-bs1"}, first, CONFIG, remeasure, None) is True
    assert verdicts[0].confirmed is None and failed(verdicts)
    assert "interrupted" in run.confirmation["error"]
    assert any("interrupted" in n for n in confirmation_notes(run.confirmation))


def test_a_budget_too_small_leaves_the_regression_failing_unconfirmed(tmp_path):
    options = AbOptions(base="HEAD", confirm_budget=5.0)
    run = AbRun(options, _measured(tmp_path, 1.2), tmp_path, "a", "b", False, "", 10.0)
    verdicts = [_flagged("m-x-cpu-bs1", 1.2)]

    def remeasure(items: list[str]) -> Measured:
        raise AssertionError("nothing fits the budget: nothing is measured again")

    assert confirm(run, verdicts, {"m-x-cpu-bs1"}, {}, CONFIG, remeasure, None) is False
    assert verdicts[0].confirmed is None and failed(verdicts)
    assert run.confirmation["left_out"] == ["m-x-cpu-bs1"]
    assert "raise `--confirm-budget`" in confirmation_notes(run.confirmation)[0]


def test_the_first_measurement_sets_the_size_never_the_significance():
    """A first ratio of 1.10 (the pairs that flagged it) with fresh pairs around 1.00 does not confirm:
    before, the test ran on both measurements' pairs together, and the first pairs carried it."""
    verdicts = [_flagged("flagged", 1.10)]
    first = {"flagged": _pairs(1.10, seed=11)}
    for seed in range(20):  # whichever way noise makes the fresh sessions lean
        fresh = {"flagged": _pairs(1.00, seed=100 + seed)}
        again = ab_confirm.judge(list(verdicts), ["flagged"], first, fresh, CONFIG)
        assert again["flagged"].verdict == UNCHANGED, (seed, again["flagged"].reason)


def test_fresh_sessions_that_do_not_lean_slower_refute_on_their_own():
    verdicts = [_flagged("case", 1.30)]
    again = ab_confirm.judge(
        verdicts, ["case"], {"case": _pairs(1.30, seed=1)}, {"case": _pairs(0.97, seed=2)}, CONFIG
    )
    assert again["case"].verdict == UNCHANGED and verdicts[0].confirmed is False and not failed(verdicts)


def _identity(case_id: str, mode: str) -> dict:
    """A passed row's identity, as a session writes it."""
    return {"case_id": case_id, "model": "m", "technique": case_id.split("-")[1], "device": "cpu",
            "mode": mode, "batch_size": 1, "input_shape": "3x8x8", "weights": "random", "status": "passed",
            "dtype": "float32", "machine_fingerprint": "fp"}  # fmt: skip


def test_a_case_without_pairs_of_slices_is_not_gated_on_latency_and_says_why(tmp_path):
    """A loader epoch is timed whole: too few pairs to judge on, and a pooled test false-alarms on a
    shared machine. Its latency is left out of the gate, named in the notes; a sliced case is gated."""
    from optbench.ab.outcome import gate

    sides = {}
    for name, factor in (("base", 1.0), ("head", 1.5)):  # head's loader epochs 1.5x slower
        side = Side(name, "0" * 40, tmp_path, {}, tmp_path / "raw" / name, tmp_path / f"{name}.log")
        sliced = [s for b, _ in _pairs(1.0, seed=3) for s in b]
        side.rows = [
            SessionRow({**_identity("m-eager-cpu-bs1", "inference"), "samples_ms": sliced}, 1, "t[a]",
                       [3 * k for k in range(1, 16)]),
            SessionRow({**_identity("m-workers_2-cpu-bs1-data", "data"),
                        "samples_ms": [100.0 * factor + i for i in range(8)]}, 1, "t[b]", []),
        ]  # fmt: skip
        sides[name] = side
    measured = Measured(sides, ["t[a]", "t[b]"], {"t[a]": 1.0, "t[b]": 1.0}, 1.0)
    run = AbRun(
        AbOptions(base="HEAD", confirm_budget=0),
        measured,
        tmp_path / "out",
        "a",
        "b",
        False,
        "base runs its own optbench",
        5.0,
    )
    code = gate(run, CONFIG)
    payload = json.loads((tmp_path / "out" / "gate.json").read_text())
    (data,) = [
        v for v in payload["verdicts"] if v["case_id"].endswith("-data") and v["metric"] == "latency_ms"
    ]
    assert data["verdict"] == "not_comparable" and data["reason"].startswith("not gated: fewer than")
    assert code == 0 and payload["failed"] is False
    text = (tmp_path / "out" / "gate.md").read_text()
    assert "1 case(s) not gated on latency" in text and "`m-workers_2-cpu-bs1-data`" in text


def _exact(found: list[float]) -> list[tuple[list[float], list[float]]]:
    return [([10.0] * 3, [10.0 * r] * 3) for r in found]


SCREENED = [1.08 * (1 + 0.001 * i) for i in range(13)] + [0.9, 0.93, 0.95]
"""8% slower with three pairs the other way: one-sided p 0.0046 on its own, 0.018 after Holm over 4."""


def test_a_case_significant_only_before_correction_is_screened_and_measured_after_the_regressions(
    tmp_path,
):
    from optbench.gate import paired

    first = {"s": _exact(SCREENED), **{f"n{k}": _pairs(1.0, seed=20 + k) for k in range(3)}}
    verdicts = [Verdict(c, "latency_ms", UNCHANGED) for c in first]
    judged = paired.decide(verdicts, first, "holm", CONFIG.for_case, screen=True)
    s = verdicts[0]
    assert judged == set(first) and s.verdict == UNCHANGED and s.screened
    assert s.p_value < 0.01 < s.p_adjusted and s.ratio > 1.05
    assert "screened (p 0.00459 before correction)" in s.reason
    assert not any(v.screened for v in verdicts[1:]) and not failed(verdicts)
    # Without the screen (the second measurement's own judgement), nothing is marked.
    plain = [Verdict(c, "latency_ms", UNCHANGED) for c in first]
    paired.decide(plain, first, "holm", CONFIG.for_case)
    assert not any(v.screened for v in plain)
    # A regression is measured again before it; one the budget leaves out fails, a screened one does not.
    verdicts.append(_flagged("r", 1.2))
    items = {c: f"t[{c}]" for c in [*first, "r"]}
    seconds = dict.fromkeys(items.values(), 10.0)
    plan = ab_confirm.choose(verdicts, {*judged, "r"}, items, seconds, start_s=5.0, budget_s=30.0)
    assert plan.cases == ["r", "s"] and plan.left_out == [] and plan.unscreened == []
    plan = ab_confirm.choose(verdicts, {*judged, "r"}, items, seconds, start_s=5.0, budget_s=20.0)
    assert plan.cases == ["r"] and plan.unscreened == ["s"] and plan.left_out == []


def test_a_screened_case_fails_only_if_the_fresh_sessions_confirm_it():
    from optbench.gate import paired

    first = {"s": _exact(SCREENED), **{f"n{k}": _pairs(1.0, seed=20 + k) for k in range(3)}}
    for fresh_ratio, fails in ((1.08, True), (1.00, False)):
        verdicts = [Verdict(c, "latency_ms", UNCHANGED) for c in first]
        paired.decide(verdicts, first, "holm", CONFIG.for_case, screen=True)
        again = ab_confirm.judge(verdicts, ["s"], first, {"s": _pairs(fresh_ratio, seed=9)}, CONFIG)
        s = verdicts[0]
        assert s.confirmed is fails and bool(failed(verdicts)) is fails, s.reason
        assert s.verdict == (REGRESSED if fails else UNCHANGED)
        assert again["s"].p_adjusted < 0.01 if fails else again["s"].verdict == UNCHANGED
        assert ("not confirmed: does not fail" in s.reason) is not fails


def test_confirm_records_the_screened_cases_and_those_the_budget_left_unmeasured(tmp_path):
    verdicts = [Verdict("m-x-cpu-bs1", "latency_ms", UNCHANGED, ratio=1.08, screened=True)]
    small = AbOptions(base="HEAD", confirm_budget=5.0)
    run = AbRun(small, _measured(tmp_path, 1.2), tmp_path, "a", "b", False, "", 10.0)

    def remeasure(items: list[str]) -> Measured:
        raise AssertionError("nothing fits the budget: nothing is measured again")

    assert confirm(run, verdicts, {"m-x-cpu-bs1"}, {}, CONFIG, remeasure, None) is False
    assert run.confirmation["unscreened"] == ["m-x-cpu-bs1"] and not run.confirmation["left_out"]
    assert not failed(verdicts) and "they stay unchanged" in confirmation_notes(run.confirmation)[0]
    run = AbRun(AbOptions(base="HEAD"), _measured(tmp_path, 1.2), tmp_path, "a", "b", False, "", 10.0)
    first = {"m-x-cpu-bs1": _exact(SCREENED)}
    confirm(run, verdicts, {"m-x-cpu-bs1"}, first, CONFIG, lambda items: _measured(tmp_path / "2", 1.1), None)
    assert run.confirmation["screened"] == ["m-x-cpu-bs1"] and verdicts[0].confirmed
    assert failed(verdicts) and any("of which screened" in n for n in confirmation_notes(run.confirmation))


def test_a_case_only_the_pairs_find_slower_is_still_looked_up_in_the_ignore_list(tmp_path):
    """7% slower: past the pairs' 5% threshold but not the pooled 10% one, so only the paired test
    regresses it, after compare() read the ignore list; an acknowledged case must still not fail."""
    from dataclasses import replace

    from optbench.ab.outcome import gate

    row = _identity("m-eager-cpu-bs1", "inference")
    for config, code in ((CONFIG, 1), (replace(CONFIG, ignore={"m-eager-*": "known: a bigger model"}), 0)):
        sides = {}
        for name, factor in (("base", 1.0), ("head", 1.07)):
            side = Side(name, "0" * 40, tmp_path, {}, tmp_path / "raw" / name, tmp_path / f"{name}.log")
            flat = [s * factor for b, _ in _pairs(1.0, seed=3) for s in b]
            side.rows = [SessionRow({**row, "samples_ms": flat}, 1, "t[a]", [3 * k for k in range(1, 16)])]
            sides[name] = side
        measured = Measured(sides, ["t[a]"], {"t[a]": 1.0}, 1.0)
        options = AbOptions(base="HEAD", confirm_budget=0)
        out = tmp_path / f"out{code}"
        run = AbRun(options, measured, out, "a", "b", False, "both sides run one optbench", 5.0)
        assert gate(run, config) == code
        (latency,) = [
            v for v in json.loads((out / "gate.json").read_text())["verdicts"] if v["metric"] == "latency_ms"
        ]
        assert latency["verdict"] == "regressed" and (latency["ignored"] is not None) is (code == 0)
