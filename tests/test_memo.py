"""Reused evaluations and short trainings (optbench.measure.memo): a warm run reads back what the same
code, weights, technique, inputs and machine gave before, and measures afresh whenever any differ."""

import pytest
import torch

import optbench.measure.inference as inference_module
import optbench.measure.training as training_module
from optbench.catalog.weights import WeightsProvider
from optbench.matrix.case import Case
from optbench.matrix.profiles import TimingPolicy
from optbench.measure.memo import Memo, key, tensor_digest
from optbench.pytest_plugin.runner import CaseFailed, CaseRunner, RunState
from optbench.results import ResultsWriter

FAST = TimingPolicy(warmup_s=0.0, warmup_rounds=2, budget_s=0.05, min_rounds=6, max_rounds=50)


def _state(tmp_path, name, memo, **kw):
    weights = WeightsProvider("trained", cache_root=tmp_path / "cache", progress=False, image_task="digits")
    return RunState(
        run_id=name, writer=ResultsWriter(tmp_path / name), timing=FAST, weights=weights, memo=memo, **kw
    )


class _Counting:
    """Wraps a function and counts its calls."""

    def __init__(self, real):
        self.real, self.calls = real, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.real(*args, **kwargs)


def test_a_second_run_reads_the_evaluations_back_and_a_changed_setting_evaluates_again(
    tmp_path, registries, monkeypatch
):
    memo = Memo(tmp_path / "cache")
    first = CaseRunner(_state(tmp_path, "one", memo))
    cold = {t: first.run(Case("tiny_mlp", t, "cpu", 4)) for t in ("eager", "int8_dynamic")}
    assert {row["eval_cached"] for row in cold.values()} == {False}
    assert len(list((tmp_path / "cache" / "evaluations").glob("*.pt"))) == 2

    evaluate = _Counting(inference_module.evaluate)
    monkeypatch.setattr(inference_module, "evaluate", evaluate)
    warm = {t: CaseRunner(_state(tmp_path, "two", memo)).run(Case("tiny_mlp", t, "cpu", 4)) for t in cold}
    assert evaluate.calls == 0 and {row["eval_cached"] for row in warm.values()} == {True}
    for technique, row in warm.items():
        # The same logits: the same accuracy, fidelity and verdict; timing is measured again.
        for column in ("top1", "top1_fp32", "agreement", "max_abs_error", "accuracy_verdict", "status"):
            assert row[column] == cold[technique][column], (technique, column)
        assert row["samples_ms"] != cold[technique]["samples_ms"]

    # A setting that changes what is evaluated makes a new key: evaluated again.
    other = CaseRunner(_state(tmp_path, "three", memo, calibration_samples=64))
    assert other.run(Case("tiny_mlp", "eager", "cpu", 4))["eval_cached"] is False and evaluate.calls == 2

    # Reuse off (--fresh-evaluations, a gated run): evaluated, and the column says nothing was reused.
    fresh = CaseRunner(_state(tmp_path, "four", None)).run(Case("tiny_mlp", "eager", "cpu", 4))
    assert fresh["eval_cached"] is None and evaluate.calls == 4  # eager evaluates twice (determinism)


def test_optbench_abs_sessions_reuse_only_what_their_own_tree_made(tmp_path, registries, monkeypatch):
    from optbench.pytest_plugin.runner import plain_timer

    memo = Memo(tmp_path / "cache")
    case = Case("tiny_mlp", "eager", "cpu", 4)
    CaseRunner(_state(tmp_path, "one", memo)).run(case)
    assert CaseRunner(_state(tmp_path, "two", memo)).run(case)["eval_cached"]

    def paced(call, rounds, warmup, *, paced=True):  # what optbench ab's sessions time with
        return plain_timer(call, rounds, warmup, paced=paced)

    paced.pacer = object()
    # A session that does not know which code it runs reuses nothing, not even a plain run's.
    state = _state(tmp_path, "three", memo)
    row = CaseRunner(state).run(case, time_fn=paced)
    assert state.memo is None and row["eval_cached"] is None
    # One that does (optbench ab names each side's commit and uncommitted changes) reuses only what
    # that same tree made: the plain runs' evaluations are under another key.
    evaluate = _Counting(inference_module.evaluate)
    monkeypatch.setattr(inference_module, "evaluate", evaluate)
    first = CaseRunner(_state(tmp_path, "four", memo, memo_tree="abc123")).run(case, time_fn=paced)
    assert first["eval_cached"] is False and evaluate.calls == 2  # eager evaluates twice (determinism)
    again = CaseRunner(_state(tmp_path, "five", memo, memo_tree="abc123")).run(case, time_fn=paced)
    assert again["eval_cached"] is True and evaluate.calls == 2 and again["top1"] == first["top1"]
    other = CaseRunner(_state(tmp_path, "six", memo, memo_tree="abc123+0f0f")).run(case, time_fn=paced)
    assert other["eval_cached"] is False and evaluate.calls == 4


def test_a_gated_session_gets_a_memo_only_when_it_knows_its_tree(tmp_path, monkeypatch):
    from optbench.ab.worktree import MEMO_TREE_ENV
    from optbench.pytest_plugin import hooks

    class Config:  # the one option _memo reads from pytest's config
        def __init__(self, compare):
            self.compare = compare

        def getoption(self, name, default=None):
            return self.compare if name == "optbench_compare" else default

    monkeypatch.setenv("OPTBENCH_CACHE", str(tmp_path))
    monkeypatch.delenv(MEMO_TREE_ENV, raising=False)
    assert hooks._memo(Config(None), {"fresh_evaluations": False}) is not None
    assert hooks._memo(Config("baseline"), {"fresh_evaluations": False}) is None
    monkeypatch.setenv(MEMO_TREE_ENV, "abc123")
    assert hooks._memo(Config("baseline"), {"fresh_evaluations": False}) is not None
    assert hooks._memo(Config("baseline"), {"fresh_evaluations": True}) is None


def test_a_second_run_reuses_the_short_training(tmp_path, registries, monkeypatch):
    memo = Memo(tmp_path / "cache")
    case = Case("tiny_mlp", "bf16_autocast", "cpu", 8, "training")
    cold = CaseRunner(_state(tmp_path, "one", memo, converge_steps=20)).run(case)
    assert cold["converge_cached"] is False and cold["converge_top1"] is not None

    def refuse(*args, **kwargs):
        raise AssertionError("the short training ran again")

    monkeypatch.setattr(training_module, "short_training", refuse)
    warm = CaseRunner(_state(tmp_path, "two", memo, converge_steps=20)).run(case)
    assert warm["converge_cached"] is True
    for column in ("converge_top1", "converge_loss", "converge_steps", "converge_batch_size", "converge_s"):
        assert warm[column] == cold[column], column
    with pytest.raises(CaseFailed, match="ran again"):  # more steps: another key, trained again
        CaseRunner(_state(tmp_path, "three", memo, converge_steps=21)).run(case)


def test_keys_and_files():
    parts = {"model": "m", "weights": "w", "technique": "t", "inputs": tensor_digest(torch.ones(3))}
    assert key(**parts) == key(**parts)
    assert key(**{**parts, "technique": "u"}) != key(**parts)
    assert tensor_digest(torch.ones(3)) != tensor_digest(torch.ones(4))
    assert tensor_digest(torch.ones(3)) != tensor_digest(torch.ones(3, dtype=torch.float64))
    assert tensor_digest(torch.tensor([1.0, 2.0])) != tensor_digest(torch.tensor([2.0, 1.0]))


def test_a_torn_or_unwritable_cache_costs_reuse_never_the_row(tmp_path):
    memo = Memo(tmp_path)
    memo.save("k", {"logits": torch.ones(2, 3)})
    assert torch.equal(memo.load("k")["logits"], torch.ones(2, 3))
    (tmp_path / "evaluations" / "k.pt").write_bytes(b"torn")
    assert memo.load("k") is None and memo.load("absent") is None
    blocked = tmp_path / "file"
    blocked.write_text("")
    Memo(blocked).save("k", {"x": torch.ones(1)})  # its folder cannot be made: no error
    assert Memo(None).load("k") is None
