"""scripts/gate_quality.py measures the gate on the gated selection: its test-only technique joins the
gate profile's inference cases and leaves every other case of the profile as it is."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import json, sys
from optbench.catalog.models import load_user_dir, load_zoo
from optbench.catalog.techniques import load_techniques
from optbench.matrix.case import Selection, build_matrix

load_techniques()
load_zoo()
if sys.argv[1] == "injected":
    from pathlib import Path
    load_user_dir(Path(sys.argv[2]))
select = Selection(["resnet18", "lstm_classifier"], None, ["cpu"], None, sys.argv[3])
print(json.dumps({m: [c.id for c in build_matrix(select, m)] for m in ("inference", "training", "data")}))
"""


def _cases(
    tmp_path: Path, injected: bool, profile: str, settings: dict | None = None
) -> dict[str, list[str]]:
    folder = tmp_path / "techniques"
    folder.mkdir(exist_ok=True)
    shutil.copyfile(ROOT / "tests" / "gate_quality" / "gate_injected.py", folder / "gate_injected.py")
    (folder / "gate_injection.json").unlink(missing_ok=True)
    if settings is not None:
        (folder / "gate_injection.json").write_text(json.dumps(settings))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "injected" if injected else "plain", str(folder), profile],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.splitlines()[-1])


def test_the_injected_case_joins_the_gated_selection_and_nothing_else_changes(tmp_path):
    plain, injected = _cases(tmp_path, False, "gate"), _cases(tmp_path, True, "gate")
    added = {mode: [c for c in injected[mode] if c not in plain[mode]] for mode in plain}
    assert added == {
        "inference": ["resnet18-gate_injected-cpu-bs2", "lstm_classifier-gate_injected-cpu-bs32"],
        "training": [],
        "data": [],
    }
    assert all(c in injected[mode] for mode in plain for c in plain[mode])


def test_a_profile_without_its_own_list_is_left_alone(tmp_path):
    # full runs every registered technique: the injected one joins there as any plugin technique does
    plain, injected = _cases(tmp_path, False, "full"), _cases(tmp_path, True, "full")
    added = [c for c in injected["inference"] if c not in plain["inference"]]
    assert set(added) == {
        *(f"resnet18-gate_injected-cpu-bs{b}" for b in (1, 8, 32)),  # full's batch sizes
        *(f"lstm_classifier-gate_injected-cpu-bs{b}" for b in (1, 32, 128)),
    }
    assert injected["training"] == plain["training"]


def test_with_training_the_injected_case_joins_the_gated_training_cases_too(tmp_path):
    plain = _cases(tmp_path, False, "gate")
    injected = _cases(tmp_path, True, "gate", {"slowdown": 0, "flip_every": 0, "training": True})
    added = {mode: [c for c in injected[mode] if c not in plain[mode]] for mode in plain}
    assert added == {
        "inference": ["resnet18-gate_injected-cpu-bs2", "lstm_classifier-gate_injected-cpu-bs32"],
        "training": [
            "resnet18-gate_injected-cpu-bs2-training",
            "lstm_classifier-gate_injected-cpu-bs32-training",
        ],
        "data": [],
    }
    # ... and only where asked: full's training cases stay as they are without it (above)
