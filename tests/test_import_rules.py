"""The import rules (.importlinter) hold, and a change that breaks one is caught."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")


def _lint(src: Path) -> subprocess.CompletedProcess[str]:
    # grimp finds the package through sys.path: this source tree first, whatever is installed after
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [LINT, "--config", str(ROOT / ".importlinter"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


pytestmark = pytest.mark.skipif(
    LINT is None, reason="import-linter is not installed (pip install -e .[test])"
)


def test_the_import_rules_hold():
    result = _lint(ROOT / "src")
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout


def _lint_with(tmp_path: Path, line: str) -> subprocess.CompletedProcess[str]:
    """lint-imports on a copy of the source whose results/values.py gains `line`."""
    shutil.copytree(
        ROOT / "src" / "optbench", tmp_path / "optbench", ignore=shutil.ignore_patterns("__pycache__")
    )
    values = tmp_path / "optbench" / "results" / "values.py"
    values.write_text(values.read_text() + f"\n{line}\n")
    return _lint(tmp_path)


def test_results_importing_torch_breaks_a_rule(tmp_path):
    result = _lint_with(tmp_path, "import torch  # a rule-breaking change")
    assert result.returncode != 0
    assert "optbench.results is not allowed to import torch" in result.stdout
    assert "BROKEN" in result.stdout


def test_a_lower_layer_importing_a_higher_one_breaks_the_layers(tmp_path):
    result = _lint_with(tmp_path, "import optbench.report.tables  # a cycle between packages")
    assert result.returncode != 0
    assert "optbench.results is not allowed to import optbench.report" in result.stdout
