"""A case one call of which takes longer than --call-timeout becomes a timeout row; the run goes on."""

from __future__ import annotations

import time

import pytest

from optbench.catalog.techniques import Technique, register_technique
from optbench.matrix.case import Case
from optbench.matrix.profiles import TimingPolicy
from optbench.pytest_plugin.runner import CaseFailed, CaseRunner, RunState
from optbench.results import ResultsWriter, load

FAST = TimingPolicy(warmup_s=0.0, warmup_rounds=2, budget_s=0.05, min_rounds=6, max_rounds=50)


@register_technique
class SlowCalls(Technique):
    name = "test_slow_calls"
    family = "precision"
    api = "test"

    def apply(self, prepared, ctx):
        module = prepared.forward

        def forward(*args):
            time.sleep(0.3)
            return module(*args)

        return prepared.then(self.api, forward=forward)


@register_technique
class SlowFirstCall(Technique):
    name = "test_slow_first_call"
    family = "compile"
    api = "test"

    def apply(self, prepared, ctx):
        module, calls = prepared.forward, [0]

        def forward(*args):
            calls[0] += 1
            if calls[0] == 1:
                time.sleep(0.3)  # like compiling on the first call
            return module(*args)

        return prepared.then(self.api, forward=forward)


def test_the_first_call_is_preparation_and_is_not_held_to_the_limit(tmp_path, registries):
    state = RunState(run_id="t", writer=ResultsWriter(tmp_path), timing=FAST, call_timeout_s=0.2)
    row = CaseRunner(state).run(Case("tiny_mlp", "test_slow_first_call", "cpu", 2))
    assert row["status"] == "passed" and row["first_call_ms"] >= 300


def test_a_call_past_the_limit_is_a_timeout_row_and_the_next_case_runs(tmp_path, registries):
    state = RunState(run_id="t", writer=ResultsWriter(tmp_path), timing=FAST, call_timeout_s=0.2)
    runner = CaseRunner(state)
    started = time.perf_counter()
    with pytest.raises(CaseFailed, match="over the 0.2 s limit"):
        runner.run(Case("tiny_mlp", "test_slow_calls", "cpu", 2))
    assert time.perf_counter() - started < 30  # stopped after its first call, not timed for its budget
    after = runner.run(Case("tiny_mlp", "channels_last", "cpu", 2))
    assert after["status"] == "passed"
    state.writer.close()
    rows = load(tmp_path).set_index("technique")
    assert rows.loc["test_slow_calls", "status"] == "timeout"
    assert rows.loc["test_slow_calls", "reason"].startswith("one call took 0.3 s, over the 0.2 s limit")
