"""Every compiled case compiles its own graph: two batch sizes of one model, then another model of the
same class, each start from a clean dynamo state, and each one's prepare_s holds its compilation."""

import shutil

import pytest

from optbench.matrix.case import Case
from optbench.matrix.profiles import TimingPolicy
from optbench.pytest_plugin.runner import CaseRunner, RunState
from optbench.results import ResultsWriter

FAST = TimingPolicy(warmup_s=0.0, warmup_rounds=1, budget_s=0.05, min_rounds=3, max_rounds=10)

pytestmark = pytest.mark.skipif(
    not (shutil.which("c++") or shutil.which("g++")), reason="inductor needs a C++ compiler"
)


def test_each_compiled_case_compiles_its_own_graph(tmp_path, registries):
    # Random weights at the task shape (3x32x32): compilation costs the same, the calls far less.
    state = RunState(run_id="t", writer=ResultsWriter(tmp_path), timing=FAST, timing_shape="task")
    runner = CaseRunner(state)
    cases = [
        Case("resnet18", "compile", "cpu", 1),
        Case("resnet18", "compile", "cpu", 2),
        Case("resnet50", "compile", "cpu", 1),
    ]
    rows = [runner.run(case) for case in cases]
    for row in rows:
        assert row["status"] == "passed", row["reason"]
        assert row["input_shape"] == "3x32x32"
        # Its own graph, compiled on its first call, which prepare_s includes.
        assert row["compiled_graphs"] >= 1, row["case_id"]
        assert row["first_call_ms"] > 20 * row["latency_ms_median"], row["case_id"]
        assert row["prepare_s"] >= row["first_call_ms"] / 1e3
    eager = [r for r in state.rows if r["technique"] == "eager"]
    assert [r["compiled_graphs"] for r in eager] == [0, 0, 0]
