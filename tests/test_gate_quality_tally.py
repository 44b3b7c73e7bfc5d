"""scripts/gate_quality_tally.py: the gate-quality ledger pools only trials of one rule on one CPU, the
rule is the committed code that decides the gate, and the rates carry exact intervals."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tally():
    spec = importlib.util.spec_from_file_location(
        "gate_quality_tally", ROOT / "scripts" / "gate_quality_tally.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CPU_A = {"cpu": "AMD EPYC", "cpu_id": "25/17/1", "cores": "2", "cpu_capability": "AVX512", "fingerprint": "a"}
CPU_B = {**CPU_A, "cpu_id": "25/1/1", "cpu_capability": "AVX2", "fingerprint": "b"}


def _trial(kind="A/A", exit=0, rule="r1", cpu=CPU_A, **extra):
    return {
        "kind": kind, "exit": exit, "error": "", "flagged": [], "unconfirmed": [], "rule": rule,
        "cpu": cpu, "commit": "c1", "when": "2026-12-06T10:00:00Z", "cases_judged": 25,
        "latency_judged": 22, "wall_s": 340.0, **extra,
    }  # fmt: skip


def test_only_one_rule_on_one_cpu_with_one_setup_is_pooled(tally):
    other_setup = {"rounds": 1, "slices": 8, "alpha": 0.01, "versions": {"torch": "2.14.1"}}
    trials = [_trial(), _trial(rule="r2"), _trial(cpu=CPU_B), _trial(setup=other_setup), _trial()]
    pools = tally.pools(trials)
    assert len(pools) == 4
    assert len(pools[tally.pool_key(_trial())]) == 2


def test_rates_carry_exact_intervals_and_the_cost(tally, capsys):
    trials = [_trial(plain_s=120.0) for _ in range(20)] + [_trial(exit=1, flagged=["x:latency_ms"])]
    tally.summarize(trials)
    out = capsys.readouterr().out
    assert "A/A, runs that failed (false-alarm rate per run of the selection): 1 of 21 (5%" in out
    # 1 case flagged in 21 x 25 case tests
    assert "1 of 525" in out
    assert "median 340 s against 120 s plain (20 runs)" in out and "the gate adds 1.83x" in out
    capsys.readouterr()
    tally.summarize([_trial() for _ in range(20)])
    assert "0 of 20 (0%, 95% Clopper-Pearson [0.0%, 16.8%])" in capsys.readouterr().out


def _injected(p_first, p_again, metric="latency_ms"):
    return _trial(
        "slowdown 10%", 1, selection="injected-only", latency_judged=4, injected_caught=True,
        injected_cases=["m-gate_injected"], injected_cases_caught=["m-gate_injected"],
        flagged=[f"m-gate_injected:{metric}"], injected_p={"m-gate_injected": p_first},
        injected_confirm_p={"m-gate_injected": p_again},
    )  # fmt: skip


def test_an_injected_run_on_fewer_cases_counts_only_if_it_holds_at_the_whole_selections_size(tally, capsys):
    strong = _injected(1.5e-5, 3.1e-5)
    weak_first = _injected(0.001, 3.1e-5)  # x 22 = 0.022: Holm over the whole selection could miss it
    weak_again = _injected(1.5e-5, 0.001)  # so could the confirmation
    accuracy = _injected(None, None, metric="top1")  # not corrected over cases: holds
    tally.summarize([_trial(), strong, weak_first, weak_again, accuracy])
    out = capsys.readouterr().out
    assert "caught in 4 of 4, of which 2 hold at the whole selection's correction (22 latency cases" in out
    assert "detected in 2 of 4 (50%" in out
    # Without a whole-selection A/A run in the pool there is nothing to check them against.
    tally.summarize([strong])
    assert "not counted as detection" in capsys.readouterr().out


def test_the_ledger_reads_what_a_gate_json_says(tally):
    slices = [1.0, 1.1, 1.12, 1.09, 1.11, 1.1, 1.13, 1.08]
    recorded = {
        "verdicts": [
            {"case_id": "m-gate_injected", "metric": "latency_ms", "verdict": "regressed", "p_value": 0.004,
             "confirmed": True},
            {"case_id": "m-eager", "metric": "latency_ms", "verdict": "regressed", "p_value": 0.003,
             "confirmed": False},
            {"case_id": "m-eager-data", "metric": "latency_ms", "verdict": "not_comparable"},
            {"case_id": "m-eager", "metric": "top1", "verdict": "unchanged"},
        ],
        "ab": {"rounds": 1, "slices": 16, "confirmation": {"paired_ratios": {"m-gate_injected": slices}},
               "allocator": {"mode": "fixed", "environment": {"MALLOC_MMAP_THRESHOLD_": "1073741824"}}},
    }  # fmt: skip
    found = tally.outcome(recorded)
    assert found["latency_judged"] == 2  # the data case's epochs are not judged on pairs
    assert found["cases_judged"] == 2
    assert found["flagged"] == ["m-gate_injected:latency_ms"]
    assert found["unconfirmed"] == ["m-eager:latency_ms"]
    assert found["injected_p"] == {"m-gate_injected": 0.004}
    assert 0 < found["injected_confirm_p"]["m-gate_injected"] < 0.01
    assert found["allocator"]["mode"] == "fixed"  # what both sessions' malloc ran with


def test_injected_training_cases_widen_the_correction_and_are_counted_apart(tally, capsys):
    cases = ["m-gate_injected", "m-gate_injected-training"]

    def run(p_training):
        return _trial(
            "slowdown 10% (training too)", 1, selection="injected-only", latency_judged=6, injected_caught=True,
            injected_cases=cases, injected_cases_caught=cases[:1] if p_training is None else cases,
            flagged=["m-gate_injected:latency_ms"], injected_p={"m-gate_injected": 4.4e-4},
            injected_confirm_p={"m-gate_injected": 4.4e-4},
        )  # fmt: skip

    tally.summarize([_trial(), run(None), run(1e-5)])
    out = capsys.readouterr().out
    # 4.4e-4 x 22 < 0.01 would hold; the injected training case makes it 23 cases: x 23 > 0.01
    assert "of which 0 hold at the whole selection's correction (23 latency cases" in out
    assert "slowdown 10% (training too), per injected training case: caught 1 of 2" in out


def test_injected_only_selects_the_injected_and_eager_inference_cases(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from gate_quality import INJECTED_ONLY, INJECTED_ONLY_TRAINING
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    ids = [
        "resnet18-eager-cpu-bs2", "resnet18-gate_injected-cpu-bs2", "resnet18-channels_last-cpu-bs2",
        "resnet18-eager-cpu-bs2-training", "resnet18-eager-cpu-bs8-data", "lstm_classifier-eager-cpu-bs32",
    ]  # fmt: skip
    (tmp_path / "test_inference.py").write_text(
        f"import pytest\n@pytest.mark.parametrize('c', {ids!r}, ids={ids!r})\ndef test_inference(c): pass\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-k", INJECTED_ONLY,
         str(tmp_path)], capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    chosen = sorted(line.split("[")[1].rstrip("]") for line in done.stdout.splitlines() if "::" in line)
    assert chosen == [
        "lstm_classifier-eager-cpu-bs32",
        "resnet18-eager-cpu-bs2",
        "resnet18-gate_injected-cpu-bs2",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-k",
         INJECTED_ONLY_TRAINING, str(tmp_path)], capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    chosen = sorted(line.split("[")[1].rstrip("]") for line in done.stdout.splitlines() if "::" in line)
    assert "resnet18-eager-cpu-bs2-training" in chosen and "resnet18-eager-cpu-bs8-data" not in chosen


def _repo(path: Path) -> None:
    for name in ("src/optbench/gate/rule.py", "src/optbench/report/page.py", "bench/b.py", "models/m.py",
                 "tests/gate_quality/t.py", "pyproject.toml", "docs/d.md"):  # fmt: skip
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text("x = 1\n")
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    _commit(path)


def _commit(path: Path) -> None:
    subprocess.run(["git", "add", "-A"], cwd=path, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"], cwd=path, check=True
    )


def test_the_rule_is_the_gates_committed_code(tally, tmp_path, monkeypatch):
    _repo(tmp_path)
    monkeypatch.setattr(tally, "ROOT", tmp_path)
    commit, first = tally.rule()
    # Docs and reports do not change what the gate measures: same rule, new commit.
    for name in ("docs/d.md", "src/optbench/report/page.py"):
        (tmp_path / name).write_text("x = 2\n")
    assert tally.rule()[1] == first  # uncommitted report and docs changes are allowed
    _commit(tmp_path)
    again, same = tally.rule()
    assert same == first and again != commit
    # The gate's own code does, and uncommitted changes to it are refused: the trials run HEAD.
    (tmp_path / "src/optbench/gate/rule.py").write_text("x = 3\n")
    with pytest.raises(SystemExit, match="uncommitted changes to the gate's code"):
        tally.rule()
    _commit(tmp_path)
    assert tally.rule()[1] != first


def test_the_command_prints_each_pool(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text("".join(json.dumps(t) + "\n" for t in [_trial(), _trial(cpu=CPU_B)]))
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gate_quality_tally.py"), str(ledger)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout.count("## rule r1: 1 trials") == 2
    assert "capability AVX2" in done.stdout and "capability AVX512" in done.stdout
    bad = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gate_quality_tally.py")], capture_output=True, text=True
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_under_the_screen_a_catch_measured_again_holds_on_its_confirmation_alone(tally, capsys):
    """The screen tests the first measurement uncorrected and the confirmation corrected over the cases
    measured again, plus the most a whole selection's A/A run measured again."""

    def screened(p_first, p_again, remeasured):
        return {**_injected(p_first, p_again), "screen": True, "remeasured": remeasured}

    aa = {**_trial(), "screen": True, "remeasured": 1}
    held = screened(0.004, 0.002, 2)  # 0.004 < 0.01; 0.002 x (2 + 1) < 0.01
    confirm_weak = screened(0.004, 0.004, 2)  # 0.004 x 3 > 0.01
    first_weak = screened(0.02, 1e-5, 1)  # not even screened at 0.02: caught some other way, not held
    tally.summarize([aa, held, confirm_weak, first_weak])
    out = capsys.readouterr().out
    assert "caught in 3 of 3, of which 1 hold at the whole selection's correction" in out
    assert "a screened catch: first p < 0.01 and the confirmation's p x (cases measured again + 1)" in out
    assert not tally.holds_at(_injected(0.004, 0.002), 22, 0.01)  # the rule before: 0.004 x 22 > 0.01


def test_the_ledger_reads_the_screen_from_a_gate_json(tally):
    recorded = {
        "verdicts": [
            {"case_id": "m-gate_injected", "metric": "latency_ms", "verdict": "regressed", "p_value": 0.004,
             "confirmed": True, "screened": True},
            {"case_id": "m-eager", "metric": "latency_ms", "verdict": "unchanged", "p_value": 0.3,
             "confirmed": None, "screened": False},
        ],
        "ab": {"rounds": 1, "slices": 16, "confirmation": {"cases": ["m-gate_injected"], "paired_ratios": {}}},
    }  # fmt: skip
    found = tally.outcome(recorded)
    assert found["screen"] and found["screened"] == ["m-gate_injected"] and found["remeasured"] == 1
    assert found["flagged"] == ["m-gate_injected:latency_ms"]
    old = tally.outcome(
        {**recorded, "verdicts": [{k: v for k, v in recorded["verdicts"][1].items() if k != "screened"}]}
    )
    assert not old["screen"] and old["screened"] == []
